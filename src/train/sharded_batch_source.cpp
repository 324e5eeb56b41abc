// ShardedBatchSource: every world_size-th micro-batch of the stream (See Note [Data-parallel
// batches equal a single process's]).
#include "train/sharded_batch_source.h"

#include "core/error.h"

namespace headroom {

ShardedBatchSource::ShardedBatchSource(std::unique_ptr<BatchSource> inner, int rank, int world_size)
    : inner_(std::move(inner)), rank_(rank), world_size_(world_size) {
  if (world_size_ < 1 || rank_ < 0 || rank_ >= world_size_) {
    throw ValueError(
        str_cat("ShardedBatchSource: rank ", rank_, " is outside 0..", world_size_ - 1));
  }
  if (inner_->batches_per_epoch() < world_size_) {
    throw ValueError(str_cat("data: ", inner_->batches_per_epoch(),
                             " micro-batches per epoch, fewer than the ", world_size_,
                             " ranks (world_size); use more data or a smaller "
                             "per_device_train_batch_size"));
  }
}

TokenBatch ShardedBatchSource::next_batch() {
  for (int r = 0; r < rank_; ++r) inner_->skip_batch();
  TokenBatch batch = inner_->next_batch();
  for (int r = rank_ + 1; r < world_size_; ++r) inner_->skip_batch();
  return batch;
}

void ShardedBatchSource::skip_batch() {
  for (int r = 0; r < world_size_; ++r) inner_->skip_batch();
}

}  // namespace headroom
