// DataLoader: batches of packed sequences for a causal LM, in a seeded order per epoch, assembled
// ahead by worker threads, with a position that a checkpoint saves and a resumed run restores.
// Options are torch.utils.data.DataLoader's (as HF TrainingArguments' dataloader_* pass them).
//
// Note [DataLoader determinism]
// Batch b of epoch e holds sequences order_e[b * B .. (b + 1) * B) (the last batch may be short
// unless drop_last), where order_e is epoch_permutation(n, seed, e) when shuffling and 0..n-1
// otherwise. A batch is a pure function of (data, B, seed, e, b): workers only decide *when* it
// is assembled, never what it holds, and batches are yielded in index order, so any
// num_workers / prefetch_factor gives the batches of num_workers = 0, and a loader restored from
// state() yields exactly the batches the uninterrupted one would have.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "data/packed_sequences.h"

namespace headroom {

struct TokenBatch {
  Tensor input_ids;  // [B, T] i64 on the CPU, from its CachingAllocator (or pinned: pin_memory)
  Tensor targets;    // [B, T] i64: input_ids shifted left by one token
  // The targets that are not -100, counted on the host as the batch was assembled (every id of
  // a TokenCorpus lies in its tokenizer's vocabulary); -1: not counted (the loss counts them).
  int64_t target_count = -1;
  // Several sequences packed in a row (data/sequence_packing.h): their starts over the flattened
  // [B * T] positions, flash-attention's cu_seqlens (Note [Packed sequences in attention]); empty
  // when each row is one sequence.
  std::vector<int32_t> cu_seqlens = {};
  // The batches of this data score different numbers of targets (masked labels, padding,
  // packing): the Trainer weighs a step's micro-batches by their scored targets (Note [Scored
  // tokens across accumulation]).
  bool varying_targets = false;
};

// What a DataLoader batches: examples by index, and their collation into one batch (PyTorch's
// Dataset and collate_fn).
class ExampleSet {
 public:
  virtual ~ExampleSet() = default;
  virtual int64_t size() const = 0;
  // The batch of the examples `indices`, rows in that order, target_count counted. Called from
  // the loader's worker threads at once: it must not change the set.
  virtual TokenBatch collate(std::span<const int64_t> indices) const = 0;
};

// The windows of a token stream as examples: a [B, T] batch of input_ids and their next tokens.
class WindowExamples final : public ExampleSet {
 public:
  explicit WindowExamples(PackedSequences windows) : windows_(std::move(windows)) {}
  int64_t size() const override { return windows_.size(); }
  TokenBatch collate(std::span<const int64_t> indices) const override;

 private:
  PackedSequences windows_;
};

// Where a loader is: the next batch it yields is batch `batch_index` of epoch `epoch`, in the
// order of `seed`. Saved with checkpoints as {"epoch": 0, "batch_index": 12, "seed": 42}.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t batch_index = 0;
  uint64_t seed = 0;

  nlohmann::json to_json() const;
  // ValueError "<source>: <field> is <value>, not ..." for a missing or ill-typed field.
  static DataLoaderState from_json(const nlohmann::json& json, const std::string& source);
  bool operator==(const DataLoaderState&) const = default;
};

struct DataLoaderOptions {
  int64_t batch_size = 8;  // per_device_train_batch_size / per_device_eval_batch_size
  bool shuffle = true;     // false for eval: sequences in stream order
  uint64_t seed = 42;      // data_seed, else seed
  bool drop_last = false;  // dataloader_drop_last: drop a last batch shorter than batch_size
  // dataloader_num_workers: threads that assemble batches ahead; 0 assembles each batch in the
  // calling thread when it is asked for.
  int64_t num_workers = 0;
  // dataloader_prefetch_factor: batches each worker keeps ready (unset: 2). As in PyTorch, only
  // with num_workers > 0.
  std::optional<int64_t> prefetch_factor = std::nullopt;
  // dataloader_persistent_workers: keep the worker threads between epochs instead of joining them
  // at the end of each epoch and starting new ones. Only with num_workers > 0, as in PyTorch.
  bool persistent_workers = false;
  // dataloader_pin_memory: batches are copied into page-locked memory (Tensor::pin_memory) in
  // the thread that assembles them, so that their copy to the GPU can be queued and overlap the
  // step before (DataLoaderBatchSource does it on a copy stream). Only when pin_memory_device is
  // a GPU: for the CPU or meta, pinning would change nothing, and batches stay as they are.
  bool pin_memory = false;
  // Where the batches go (PyTorch's pin_memory_device); DataLoaderBatchSource sets its device.
  Device pin_memory_device = kCPU;
};

class DataLoader {
 public:
  // A loader over `data`; with `resume`, positioned at that state (its seed, not options.seed,
  // then orders the batches, so a resumed run continues the order it started with). ValueError for
  // options or a state out of range, naming the field, its value and the limit.
  DataLoader(std::shared_ptr<const ExampleSet> data, DataLoaderOptions options,
             std::optional<DataLoaderState> resume = std::nullopt);
  // Over the windows of a token stream (WindowExamples).
  DataLoader(PackedSequences data, DataLoaderOptions options,
             std::optional<DataLoaderState> resume = std::nullopt);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // len(loader): batches per epoch (0 when drop_last leaves none).
  int64_t size() const { return num_batches_; }
  int64_t num_sequences() const { return data_->size(); }
  const DataLoaderOptions& options() const { return options_; }

  // The next batch of the current epoch, or nullopt once the epoch is exhausted; the call that
  // returns nullopt moves the loader to batch 0 of the next epoch.
  std::optional<TokenBatch> next();

  // The position of the batch the next call to next() yields.
  DataLoaderState state() const { return {epoch_, batch_index_, options_.seed}; }
  int64_t epoch() const { return epoch_; }
  // Moves to batch 0 of `epoch` (as torch's DistributedSampler.set_epoch before iterating).
  void set_epoch(int64_t epoch);

  // Batch `index` of `epoch`, assembled now in this thread (what next() yields for that position).
  TokenBatch batch_at(int64_t epoch, int64_t index) const;

 private:
  class WorkerPool;

  const std::vector<int64_t>* order_for_epoch();
  TokenBatch assemble(const std::vector<int64_t>* order, int64_t index) const;

  std::shared_ptr<const ExampleSet> data_;
  DataLoaderOptions options_;
  int64_t num_batches_ = 0;
  int64_t epoch_ = 0;
  int64_t batch_index_ = 0;
  // The shuffled order of `order_epoch_`, shared with the workers assembling its batches.
  std::shared_ptr<const std::vector<int64_t>> order_;
  int64_t order_epoch_ = -1;
  bool workers_started_epoch_ = false;
  std::unique_ptr<WorkerPool> workers_;
};

}  // namespace headroom
