// Packed batches for the model tests (nn/test_packed_models.cpp, cuda/test_cuda_packing.cpp): TRL's
// bfd rows collated padding-free, rows packed by hand, and the check that a packed batch's loss
// and gradients equal those of its sequences run one by one.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/generator.h"
#include "data/sequence_packing.h"
#include "nn/causal_lm.h"
#include "nn/expect_close.h"
#include "nn/model_presets.h"
#include "ops/ops.h"

namespace headroom::packed_test {

inline std::vector<TokenSequence> random_sequences(const std::vector<int64_t>& lengths,
                                                   int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  std::vector<TokenSequence> out;
  for (int64_t n : lengths) {
    const std::vector<float> u = Tensor::rand({n}, DType::f32, kCPU, &gen).to_float_vector();
    TokenSequence s;
    for (float x : u) s.push_back(static_cast<int64_t>(x * static_cast<float>(vocab - 1)));
    out.push_back(s);
  }
  return out;
}

// A batch of `rows` rows of equal length, each packing whole sequences (TRL's labels: no target
// across a boundary, none at a row's end), and the sequences in order.
struct Packed {
  TokenBatch batch;
  std::vector<TokenSequence> sequences;
};

inline Packed two_rows(const std::vector<std::vector<TokenSequence>>& rows) {
  Packed p;
  std::vector<int64_t> ids, targets;
  std::vector<int32_t> cu{0};
  int64_t count = 0;
  for (const auto& row : rows) {
    for (const TokenSequence& s : row) {
      p.sequences.push_back(s);
      for (size_t t = 0; t < s.size(); ++t) {
        ids.push_back(s[t]);
        targets.push_back(t + 1 < s.size() ? s[t + 1] : -100);
        count += t + 1 < s.size();
      }
      cu.push_back(static_cast<int32_t>(ids.size()));
    }
  }
  const auto b = static_cast<int64_t>(rows.size()), t = static_cast<int64_t>(ids.size()) / b;
  p.batch.input_ids = Tensor::from_ints(ids, Shape{b, t});
  p.batch.targets = Tensor::from_ints(targets, Shape{b, t});
  p.batch.target_count = count;
  p.batch.cu_seqlens = cu;
  return p;
}

// Every parameter's gradient, by name, then dropped for the next pass.
inline std::vector<std::pair<std::string, Tensor>> take_grads(CausalLM& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : model.named_parameters()) {
    out.emplace_back(name, p.grad().defined() ? p.grad().clone() : Tensor());
    p.set_grad(Tensor());
  }
  return out;
}

// Loss and gradients of the packed batch against the sequences one by one ([1, L] each, scored
// on its L - 1 next tokens), each one's mean loss weighted by its share of the batch's scored
// targets, as transformers divides the summed loss by num_items_in_batch.
// On the CPU the sums differ only in order: fp32 sums of the same terms, the packed GEMMs summing
// over all the batch's tokens at once where one by one sums per sequence and then accumulates.
// Each order is within about n u |terms| of the exact sum (n <= 64 tokens a sum, u = 2^-24), so
// 1e-5 of each tensor's largest magnitude bounds the difference with room to spare.
inline void expect_packed_equals_one_by_one(const char* preset, const Packed& packed,
                                            Device device = kCPU, double rtol = 1e-5) {
  SCOPED_TRACE(preset);
  const std::unique_ptr<CausalLM> model = make_causal_lm(*find_model_preset(preset), device, 11);
  model->eval();  // no dropout: both passes see the same function
  const TokenBatch& batch = packed.batch;
  const SequenceBoundaries sequences = make_sequence_boundaries(
      batch.cu_seqlens, batch.input_ids.size(0), batch.input_ids.size(1), device);
  const Tensor loss = model->loss(batch.input_ids.to(device), batch.targets.to(device),
                                  batch.target_count, sequences);
  backward(loss);
  const auto packed_grads = take_grads(*model);

  double total = 0.0;
  for (const TokenSequence& s : packed.sequences) {
    const auto n = static_cast<int64_t>(s.size());
    if (n < 2) continue;  // no target
    std::vector<int64_t> targets(s.begin() + 1, s.end());
    targets.push_back(-100);
    const Tensor one =
        model->loss(Tensor::from_ints(s, Shape{1, n}, DType::i64, device),
                    Tensor::from_ints(targets, Shape{1, n}, DType::i64, device), n - 1);
    const double weight = static_cast<double>(n - 1) / static_cast<double>(batch.target_count);
    const Tensor weighted = scale(one, weight);
    total += static_cast<double>(weighted.item());
    backward(weighted);  // gradients accumulate over the sequences
  }
  const auto single_grads = take_grads(*model);

  EXPECT_NEAR(static_cast<double>(loss.item()), total, rtol * std::abs(total));
  ASSERT_EQ(packed_grads.size(), single_grads.size());
  for (size_t i = 0; i < packed_grads.size(); ++i) {
    const auto& [name, g] = packed_grads[i];
    ASSERT_TRUE(g.defined()) << name;
    test_data::expect_close(g.to(kCPU), single_grads[i].second.to(kCPU), rtol, name);
  }
}

inline Packed bfd_packed(uint64_t seed) {
  // TRL's bfd into rows of 32, then its padding-free collation into one row.
  const std::vector<TokenSequence> examples =
      random_sequences({9, 17, 3, 30, 1, 12, 20, 5}, 256, seed);
  const PackedRows rows = pack_bfd(examples, 32);
  Packed p;
  p.batch = padding_free_batch(rows.rows, rows.seq_lengths);
  for (size_t r = 0; r < rows.rows.size(); ++r) {
    int64_t at = 0;
    for (int64_t n : rows.seq_lengths[r]) {
      p.sequences.emplace_back(rows.rows[r].begin() + at, rows.rows[r].begin() + at + n);
      at += n;
    }
  }
  return p;
}

}  // namespace headroom::packed_test
