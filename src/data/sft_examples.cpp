// SFT examples in batches: padded, padding-free or packed (Note [SFT batches]).
#include "data/sft_examples.h"

#include <algorithm>

#include "core/error.h"
#include "data/sequence_packing.h"

namespace headroom {

const char* packing_strategy_name(PackingStrategy strategy) {
  switch (strategy) {
    case PackingStrategy::bfd:
      return "bfd";
    case PackingStrategy::bfd_split:
      return "bfd_split";
    case PackingStrategy::wrapped:
      return "wrapped";
  }
  return "?";
}

SftExamples::SftExamples(std::vector<SftExample> examples, const SftBatching& batching)
    : pad_id_(batching.pad_id) {
  const bool wrapped = batching.packing_strategy == PackingStrategy::wrapped;
  padding_free_ = batching.padding_free || (batching.packing && !wrapped);
  if (batching.packing) {
    if (batching.max_length < 1) {
      throw ValueError(str_cat("max_length: ", batching.max_length, " is below 1 (packing)"));
    }
    std::vector<TokenSequence> ids, labels;
    ids.reserve(examples.size());
    labels.reserve(examples.size());
    for (SftExample& example : examples) {
      ids.push_back(std::move(example.input_ids));
      labels.push_back(std::move(example.labels));
    }
    // The strategies place examples by their lengths alone, so packing the labels the same way
    // puts each label beside its token.
    const auto pack = [&](const std::vector<TokenSequence>& sequences) {
      switch (batching.packing_strategy) {
        case PackingStrategy::bfd:
          return pack_bfd(sequences, batching.max_length);
        case PackingStrategy::bfd_split:
          return pack_bfd_split(sequences, batching.max_length);
        case PackingStrategy::wrapped:
          break;
      }
      return pack_wrapped(sequences, batching.max_length);
    };
    PackedRows rows = pack(ids);
    PackedRows label_rows = pack(labels);
    for (size_t r = 0; r < rows.rows.size(); ++r) {
      SftSample sample;
      sample.input_ids = std::move(rows.rows[r]);
      sample.labels = std::move(label_rows.rows[r]);
      sample.seq_lengths =
          !wrapped ? rows.seq_lengths[r]
                   : std::vector<int64_t>{static_cast<int64_t>(sample.input_ids.size())};
      samples_.push_back(std::move(sample));
    }
  } else {
    for (SftExample& example : examples) {
      if (example.input_ids.empty()) continue;
      const auto length = static_cast<int64_t>(example.input_ids.size());
      samples_.push_back({std::move(example.input_ids), std::move(example.labels), {length}});
    }
  }
  for (const SftSample& sample : samples_) {
    longest_ = std::max(longest_, static_cast<int64_t>(sample.input_ids.size()));
  }
}

std::vector<int64_t> SftExamples::longest_samples(int64_t count) const {
  std::vector<int64_t> order(samples_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return sample(a).input_ids.size() > sample(b).input_ids.size();
  });
  order.resize(std::min(order.size(), static_cast<size_t>(std::max<int64_t>(count, 0))));
  return order;
}

TokenBatch SftExamples::collate(std::span<const int64_t> indices) const {
  if (indices.empty()) throw ValueError("SftExamples: a batch of no examples");
  std::vector<LabeledRow> rows;
  rows.reserve(indices.size());
  for (const int64_t index : indices) {
    const SftSample& s = sample(index);
    rows.push_back({s.input_ids, s.labels, s.seq_lengths});
  }
  TokenBatch batch = collate_rows(rows, padding_free_, pad_id_);
  batch.varying_targets = true;
  return batch;
}

}  // namespace headroom
