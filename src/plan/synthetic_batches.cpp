// Meta batches in the real loader's shapes.
#include "plan/synthetic_batches.h"

#include "core/error.h"
#include "core/kernel_census.h"
#include "core/tensor.h"

namespace headroom {

SyntheticBatchSource::SyntheticBatchSource(const SyntheticBatchOptions& options)
    : options_(options) {
  if (options_.batch_size < 1 || options_.seq_length < 1) {
    throw ValueError(str_cat("synthetic batches: batch_size ", options_.batch_size,
                             " and seq_length ", options_.seq_length, " must be at least 1"));
  }
}

TokenBatch SyntheticBatchSource::make(int64_t rows, int64_t seq_length,
                                      const std::vector<int32_t>& cu_seqlens) const {
  // As DataLoader::assemble: inputs, then targets.
  return {Tensor::empty({rows, seq_length}, DType::i64, kMeta),
          Tensor::empty({rows, seq_length}, DType::i64, kMeta), rows * seq_length, cu_seqlens,
          options_.varying_targets};
}

TokenBatch SyntheticBatchSource::next_batch() {
  ++consumed_;
  if (!options_.host_is_device) {
    // DataLoaderBatchSource::to_device's two copies, as the census of a GPU step has them.
    const int64_t rows = options_.rows > 0 ? options_.rows : options_.batch_size;
    const int64_t bytes = rows * options_.seq_length * 8;
    for (int i = 0; i < 2; ++i) {
      count_tensor_kernel("transfer", options_.pinned ? "host_to_device_async" : "host_to_device",
                          kMeta, bytes, /*host_sync=*/!options_.pinned);
    }
  }
  const int64_t rows = options_.rows > 0 ? options_.rows : options_.batch_size;
  auto train_batch = [&] { return make(rows, options_.seq_length, options_.cu_seqlens); };
  if (options_.prefetched == 0) return train_batch();
  // The workers hold `prefetched` batches ready and start the next as soon as one is taken.
  while (static_cast<int64_t>(ready_.size()) < options_.prefetched) {
    ready_.push_back(train_batch());
  }
  TokenBatch batch = std::move(ready_.front());
  ready_.pop_front();
  ready_.push_back(train_batch());
  return batch;
}

void SyntheticBatchSource::skip_batch() {
  // DataLoaderBatchSource::skip_batch assembles the batch on the host and drops it, with no copy
  // to a GPU.
  if (options_.host_is_device) {
    (void)next_batch();
  } else {
    ++consumed_;
  }
}

TokenBatch SyntheticBatchSource::eval_batch(int64_t index, int64_t batch_size) const {
  if (index < 0 || index >= options_.eval_batches) {
    throw IndexError(
        str_cat("eval_batch: batch ", index, " is outside 0..", options_.eval_batches - 1));
  }
  if (options_.eval_rows > 0) {
    return make(options_.eval_rows, options_.eval_seq_length, options_.eval_cu_seqlens);
  }
  return make(batch_size, options_.seq_length, {});
}

void SyntheticBatchSource::load_state_dict(const nlohmann::json& state) {
  consumed_ = state.at("consumed").get<int64_t>();
}

}  // namespace headroom
