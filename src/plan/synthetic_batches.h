// The dry run's data: batches with the shape, dtype and allocation pattern of the real
// DataLoaderBatchSource's, on the meta device, so no data file is read.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/device.h"
#include "train/batch_source.h"

namespace headroom {

struct SyntheticBatchOptions {
  int64_t batch_size = 8;     // per_device_train_batch_size
  int64_t seq_length = 1024;  // max_seq_length
  // Batches assembled ahead by the loader's workers (num_workers x prefetch_factor). They count
  // only when the planned device is the CPU: on a GPU they wait in host memory.
  int64_t prefetched = 0;
  int64_t eval_batches = 0;  // what eval_batch_count reports (the data is unknown)
  // The planned device is the host, where the real loader assembles the batches it skips
  // (another data-parallel rank's, ShardedBatchSource): then a skipped batch is allocated too.
  bool host_is_device = true;
  // On a GPU, whether the loader pins its batches (dataloader_pin_memory): then their copies to
  // the device are queued without a host sync, else each waits (the kernel census counts them).
  bool pinned = true;
  // Planned from the data (`plan --data` with rows): the largest batch its examples make, as
  // rows x seq_length with its sequence starts (packed or padding-free) and targets that vary
  // from batch to batch (the Trainer then fetches a step's micro-batches together). rows 0:
  // batch_size. The eval batches likewise (eval_rows 0: [batch, seq_length]).
  int64_t rows = 0;
  std::vector<int32_t> cu_seqlens = {};
  bool varying_targets = false;
  int64_t eval_rows = 0;
  int64_t eval_seq_length = 0;
  std::vector<int32_t> eval_cu_seqlens = {};
};

// Batches are meta tensors. For a CPU plan they are what the loader assembles on the CPU (two
// [B, T] i64 tensors); for a GPU plan, the copies that DataLoaderBatchSource makes on the device.
// Its batches stand for DataLoaderBatchSource's: ids checked on the host, targets counted.
class SyntheticBatchSource final : public BatchSource {
 public:
  explicit SyntheticBatchSource(const SyntheticBatchOptions& options);
  bool ids_checked() const override { return true; }

  TokenBatch next_batch() override;
  void skip_batch() override;
  int64_t batches_per_epoch() const override { return 1 << 20; }
  int64_t batches_consumed() const override { return consumed_; }
  int64_t eval_batch_count(int64_t) const override { return options_.eval_batches; }
  TokenBatch eval_batch(int64_t index, int64_t batch_size) const override;
  nlohmann::json state_dict() const override { return {{"consumed", consumed_}}; }
  void load_state_dict(const nlohmann::json& state) override;

 private:
  TokenBatch make(int64_t rows, int64_t seq_length, const std::vector<int32_t>& cu_seqlens) const;

  SyntheticBatchOptions options_;
  std::deque<TokenBatch> ready_;  // the workers' prefetched batches
  int64_t consumed_ = 0;
};

}  // namespace headroom
