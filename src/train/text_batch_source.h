// The trainer's own minimal data source (to be replaced by data/'s DataLoader): text read whole,
// tokenized, packed into windows of max_seq_length + 1 tokens, the last
// validation_split_percentage of windows held out, the rest shuffled per epoch with Philox.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "io/tokenizer.h"
#include "train/batch_source.h"

namespace headroom {

// The token stream of `path`: a text file, a .jsonl file (the "text" field of each line), or a
// directory of them (files in name order, hidden files skipped). Documents are joined with the
// tokenizer's EOS id when it has one. ValueError naming the path when it cannot be read, a JSONL
// line is not an object with a string "text", or it holds no text at all.
std::vector<int32_t> tokenize_data(const std::string& path, const Tokenizer& tokenizer);

struct TextBatchSourceOptions {
  int64_t window = 257;            // max_seq_length + 1 tokens: T inputs and T next-token labels
  int64_t batch_size = 8;          // per_device_train_batch_size
  double validation_split_percentage = 5.0;
  uint64_t seed = 42;              // data_seed, else seed
  bool drop_last = false;          // dataloader_drop_last
  Device device = kCPU;
  std::string source_name = "data";  // for messages: the data path
};

class TextBatchSource final : public BatchSource {
 public:
  // Windows are cut in order, the incomplete tail dropped; the last
  // floor(windows * validation_split_percentage / 100) (at least one when the percentage is
  // positive and there are two windows or more) form the eval split. ValueError naming the data
  // and the sizes when no training window is left or, with drop_last, not one full batch.
  TextBatchSource(std::vector<int32_t> tokens, const TextBatchSourceOptions& options);

  TokenBatch next_batch() override;
  int64_t batches_per_epoch() const override;
  int64_t batches_consumed() const override { return consumed_; }
  int64_t eval_batch_count(int64_t batch_size) const override;
  TokenBatch eval_batch(int64_t index, int64_t batch_size) const override;
  // {"epoch", "batch_in_epoch", "seed", "train_windows"}: the last two must match on load.
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  int64_t train_windows() const { return train_windows_; }
  int64_t eval_windows() const { return eval_windows_; }
  // The training windows of `epoch` in the order they are served: a Fisher-Yates shuffle whose
  // draws are Philox blocks keyed by the seed, counted from epoch << 32.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  TokenBatch make_batch(const std::vector<int64_t>& windows) const;

  std::vector<int32_t> tokens_;
  TextBatchSourceOptions options_;
  int64_t train_windows_ = 0;
  int64_t eval_windows_ = 0;
  int64_t consumed_ = 0;
  int64_t epoch_ = 0;
  int64_t batch_in_epoch_ = 0;
  std::vector<int64_t> order_;  // epoch_order(epoch_)
};

// The trainer's default source for `args` (data, max_seq_length, batch size, split, seeds).
std::unique_ptr<BatchSource> make_text_batch_source(const TrainingArguments& args,
                                                    const Tokenizer& tokenizer, int64_t window,
                                                    Device device);

}  // namespace headroom
