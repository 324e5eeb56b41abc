// The seam between the trainer and its data: a stream of training micro-batches whose position
// can be saved in a checkpoint and restored, plus the held-out split. DataLoaderBatchSource
// (train/data_loader_batch_source.h) fills it from data/; tests may plug in others.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "data/data_loader.h"

namespace headroom {

// Batches are data/'s TokenBatch {input_ids, targets}, [batch, T] i64 each, on the run's device.
class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // The next training micro-batch. After the last one of an epoch the next epoch starts (in its
  // own shuffled order), so the stream never ends; the trainer decides how many steps to take.
  virtual TokenBatch next_batch() = 0;
  // Moves past the next micro-batch without handing it out (another data-parallel rank's: see
  // ShardedBatchSource). Sources that can skip without assembling or copying a batch override it.
  virtual void skip_batch() { (void)next_batch(); }
  // Micro-batches in one epoch (> 0), for num_train_epochs and the logged `epoch`.
  virtual int64_t batches_per_epoch() const = 0;
  // Micro-batches handed out so far, over all epochs.
  virtual int64_t batches_consumed() const = 0;

  // The held-out split, in order, in batches of `batch_size` windows (the last may be smaller).
  virtual int64_t eval_batch_count(int64_t batch_size) const = 0;
  virtual TokenBatch eval_batch(int64_t index, int64_t batch_size) const = 0;

  // The position (and whatever else decides the batches to come), as JSON; stored in a
  // checkpoint's rng_state.json. After load_state_dict, next_batch() continues exactly where the
  // saved source stood. ValueError naming the key when the state does not fit this source.
  virtual nlohmann::json state_dict() const = 0;
  virtual void load_state_dict(const nlohmann::json& state) = 0;

  // True when every id and target it hands out lies in the tokenizer's vocabulary (checked where
  // the tokens were made) and every batch carries its target_count: the model then checks no id
  // and the loss counts no target on the device (Note [Targets counted by the caller]).
  virtual bool ids_checked() const { return false; }
  // Whether the examples are rows of SFT data, each up to max_length tokens, rather than windows
  // of exactly max_seq_length (the run's banner says which).
  virtual bool serves_rows() const { return false; }
};

}  // namespace headroom
