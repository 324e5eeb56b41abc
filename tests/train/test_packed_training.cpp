// The Trainer's step over packed micro-batches (Note [Scored tokens across accumulation]): the
// step's loss is the summed loss of all its scored targets over their count, as transformers'
// num_items_in_batch makes it, not the mean of the micro-batches' means.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/grad_mode.h"
#include "data/sequence_packing.h"
#include "train/batch_source.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

// Sequences of `lengths` tokens (ids below 100) in one padding-free row.
TokenBatch packed_row(const std::vector<int64_t>& lengths, int64_t first_id) {
  std::vector<TokenSequence> rows(1);
  std::vector<std::vector<int64_t>> seq_lengths(1, lengths);
  int64_t id = first_id;
  for (int64_t n : lengths) {
    for (int64_t t = 0; t < n; ++t) rows[0].push_back(id++ % 97 + 1);
  }
  return padding_free_batch(rows, seq_lengths);
}

// Two packed micro-batches in turn, of 12 and 18 scored targets.
class PackedSource final : public BatchSource {
 public:
  TokenBatch next_batch() override { return next_++ % 2 == 0 ? first() : second(); }
  static TokenBatch first() { return packed_row({5, 9}, 3); }
  static TokenBatch second() { return packed_row({16, 3, 2}, 40); }
  int64_t batches_per_epoch() const override { return 2; }
  int64_t batches_consumed() const override { return next_; }
  int64_t eval_batch_count(int64_t) const override { return 0; }
  TokenBatch eval_batch(int64_t, int64_t) const override { throw IndexError("none"); }
  nlohmann::json state_dict() const override { return {{"next", next_}}; }
  void load_state_dict(const nlohmann::json& state) override { next_ = state.at("next"); }

 private:
  int64_t next_ = 0;
};

TEST(PackedTraining, StepLossIsTheSummedLossOverAllScoredTargets) {
  test_data::TempDir dir("packed_training");
  TrainingArguments args = test_data::tiny_training_args(dir.path(), 0.0);
  args.gradient_accumulation_steps = 2;
  args.max_steps = 1;
  Trainer trainer(args, [](const TrainingArguments&, const Tokenizer&, int64_t, Device) {
    return std::make_unique<PackedSource>();
  });
  const TokenBatch a = PackedSource::first(), b = PackedSource::second();
  ASSERT_EQ(a.target_count, 12);
  ASSERT_EQ(b.target_count, 18);
  // Both micro-batches' sequences in one row: its mean is the sum over all 30 targets / 30.
  std::vector<TokenSequence> rows = {{}, {}};
  rows[0] = a.input_ids.to_int64_vector();
  rows[1] = b.input_ids.to_int64_vector();
  const TokenBatch both = padding_free_batch(rows, {{5, 9}, {16, 3, 2}});
  double expected = 0.0, mean_of_means = 0.0;
  {
    NoGradGuard no_grad;
    CausalLM& model = trainer.model();
    auto loss_of = [&](const TokenBatch& t) {
      const SequenceBoundaries s =
          make_sequence_boundaries(t.cu_seqlens, t.input_ids.size(0), t.input_ids.size(1), kCPU);
      return model.loss(t.input_ids, t.targets, t.target_count, s).item();
    };
    expected = loss_of(both);
    mean_of_means = 0.5 * (loss_of(a) + loss_of(b));
  }
  const Trainer::StepResult result = trainer.step();
  // fp32 losses of 30 targets summed in two orders: well within 1e-5 relative.
  EXPECT_NEAR(result.loss, expected, 1e-5 * expected);
  // The weighting matters here: HF without num_items_in_batch would log the mean of the means.
  EXPECT_GT(std::abs(mean_of_means - expected), 1e-4 * expected);
}

}  // namespace
}  // namespace headroom
