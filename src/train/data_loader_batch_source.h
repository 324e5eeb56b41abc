// The trainer's data over data/: a text corpus tokenised once (and cached) and cut into windows,
// or rows of TRL's SFT formats prepared as TRL does and padded or packed; the eval part held out,
// and a DataLoader serving the training part epoch after epoch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "data/data_loader.h"
#include "data/packed_sequences.h"
#include "data/sft_examples.h"
#include "io/tokenizer.h"
#include "train/batch_source.h"

namespace headroom {

struct TrainingArguments;

class DataLoaderBatchSource final : public BatchSource {
 public:
  // Trains on `split.train` through a DataLoader with `options`; evaluates on the first
  // max_eval_samples sequences of `split.eval` (run_clm's truncation; unset: all of them).
  // Batches go to `device`. ValueError naming the data when the training part holds no batch.
  DataLoaderBatchSource(TrainEvalSplit split, const DataLoaderOptions& options,
                        std::optional<int64_t> max_eval_samples = std::nullopt,
                        Device device = kCPU);
  // Trains on `train`, evaluates on `eval` (null: none). `seq_length` (the windows' or the
  // rows' max_length) and `source` (the data path) name the data in resume checks and errors.
  DataLoaderBatchSource(std::shared_ptr<const ExampleSet> train,
                        std::shared_ptr<const ExampleSet> eval, int64_t seq_length,
                        std::string source, const DataLoaderOptions& options, Device device = kCPU);

  TokenBatch next_batch() override;
  // A tokenizer's ids lie in its vocabulary; the examples count the targets.
  bool ids_checked() const override { return true; }
  bool serves_rows() const override {
    return dynamic_cast<const SftExamples*>(train_.get()) != nullptr;
  }
  void skip_batch() override;  // not copied to the device
  int64_t batches_per_epoch() const override { return loader_->size(); }
  int64_t batches_consumed() const override;
  int64_t eval_batch_count(int64_t batch_size) const override;
  TokenBatch eval_batch(int64_t index, int64_t batch_size) const override;
  // DataLoaderState's {"epoch", "batch_index", "seed"} plus {"seq_length", "train_sequences"},
  // which must match on load: a resume on other data or another max_seq_length is a ValueError
  // rather than a silently different stream. The saved seed orders the batches after a resume
  // (Note [DataLoader determinism]).
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  int64_t train_sequences() const { return train_->size(); }
  int64_t eval_sequences() const { return eval_ ? eval_->size() : 0; }

 private:
  TokenBatch to_device(TokenBatch batch) const;

  std::shared_ptr<const ExampleSet> train_;
  std::shared_ptr<const ExampleSet> eval_;
  int64_t seq_length_ = 0;
  std::string source_;
  DataLoaderOptions options_;
  Device device_;
  std::unique_ptr<DataLoader> loader_;
};

// The examples of SFT rows (is_row_data(args.data)) as `headroom train` batches them: the
// training rows, and the held-out ones (eval_data, else the last validation_split_percentage of
// the rows; null when none), prepared with max_length = window - 1.
struct SftExampleSets {
  std::shared_ptr<const SftExamples> train;
  std::shared_ptr<const SftExamples> eval;
};
SftExampleSets make_sft_example_sets(const TrainingArguments& args, const Tokenizer& tokenizer,
                                     int64_t window);

// The trainer's default source for `args`: a text corpus tokenised with the token cache in
// <output_dir>/cache and split with max_seq_length = window - 1 and validation_split_percentage;
// or rows (is_row_data) prepared as TRL does (Note [TRL's SFT preparation]) with max_length =
// window - 1, the chat template of args.model's directory or chat_template_path, held out by
// eval_data or else the last validation_split_percentage of the rows, and batched as Note [SFT
// batches] says. Batches of per_device_train_batch_size shuffled by data_seed (else seed), the
// dataloader_* options, and max_eval_samples.
std::unique_ptr<BatchSource> make_data_loader_batch_source(const TrainingArguments& args,
                                                           const Tokenizer& tokenizer,
                                                           int64_t window, Device device);

}  // namespace headroom
