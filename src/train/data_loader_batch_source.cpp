// DataLoaderBatchSource: the BatchSource seam of the trainer filled by data/'s pipeline.
#include "train/data_loader_batch_source.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "data/token_corpus.h"
#include "memory/device_memory.h"
#include "train/training_arguments.h"

namespace headroom {

DataLoaderBatchSource::DataLoaderBatchSource(TrainEvalSplit split, const DataLoaderOptions& options,
                                             std::optional<int64_t> max_eval_samples, Device device)
    : train_(std::move(split.train)),
      eval_(std::move(split.eval)),
      options_(options),
      device_(device) {
  options_.pin_memory_device = device_;
  if (max_eval_samples && *max_eval_samples < 1) {
    throw ValueError(str_cat("max_eval_samples: ", *max_eval_samples, " is below 1"));
  }
  if (max_eval_samples && eval_.size() > *max_eval_samples) {
    // The first max_eval_samples sequences: their T + 1 tokens each, advancing by T.
    const int64_t t = eval_.seq_length();
    eval_ = PackedSequences(eval_.tokens(), eval_.begin(),
                            eval_.begin() + *max_eval_samples * t + 1, t);
  }
  loader_ = std::make_unique<DataLoader>(train_, options_);
  if (loader_->size() == 0) {
    throw ValueError(str_cat("data '", train_.tokens()->source(), "': ", train_.size(),
                             " training sequences of ", train_.seq_length(),
                             " tokens, fewer than one batch of ", options_.batch_size,
                             " with dataloader_drop_last"));
  }
}

TokenBatch DataLoaderBatchSource::to_device(TokenBatch batch) const {
  if (device_.is_cpu()) return batch;
  if (!batch.input_ids.is_pinned() || !batch.targets.is_pinned()) {
    return {batch.input_ids.to(device_), batch.targets.to(device_), batch.target_count,
            std::move(batch.cu_seqlens)};
  }
  // Note [Batches on the copy stream]
  // A pinned batch is allocated and copied on the device's copy stream, so the copy runs while
  // the compute stream still works through the step before (the host queues steps ahead of the
  // GPU). The compute stream waits for the copy before the step's first kernel, and the batch is
  // recorded as used there, so its memory goes back to the copy stream's pool only once the step
  // that read it has run (Note [Streams and reuse]). The pinned source is held back the same way
  // until its copy is done (HostCachingAllocator).
  const StreamId compute = current_stream(device_);
  TokenBatch out;
  out.target_count = batch.target_count;
  out.cu_seqlens = std::move(batch.cu_seqlens);
  {
    StreamGuard on_copy_stream(device_, copy_stream(device_));
    out.input_ids = batch.input_ids.to(device_, /*non_blocking=*/true);
    out.targets = batch.targets.to(device_, /*non_blocking=*/true);
  }
  wait_stream(device_, compute, copy_stream(device_));
  out.input_ids.record_stream(compute);
  out.targets.record_stream(compute);
  return out;
}

TokenBatch DataLoaderBatchSource::next_batch() {
  std::optional<TokenBatch> batch = loader_->next();
  // nullopt ends an epoch and moves the loader to the next one; size() > 0, so it has a batch.
  if (!batch) batch = loader_->next();
  return to_device(std::move(*batch));
}

void DataLoaderBatchSource::skip_batch() {
  if (!loader_->next()) (void)loader_->next();
}

int64_t DataLoaderBatchSource::batches_consumed() const {
  const DataLoaderState state = loader_->state();
  return state.epoch * loader_->size() + state.batch_index;
}

int64_t DataLoaderBatchSource::eval_batch_count(int64_t batch_size) const {
  return (eval_.size() + batch_size - 1) / batch_size;
}

TokenBatch DataLoaderBatchSource::eval_batch(int64_t index, int64_t batch_size) const {
  if (index < 0 || index >= eval_batch_count(batch_size)) {
    throw IndexError(
        str_cat("eval_batch: batch ", index, " is outside 0..", eval_batch_count(batch_size) - 1));
  }
  // An unshuffled loader's batch `index` is eval sequences [index * B, (index + 1) * B), in order.
  const DataLoader eval(eval_, {.batch_size = batch_size, .shuffle = false});
  return to_device(eval.batch_at(0, index));
}

nlohmann::json DataLoaderBatchSource::state_dict() const {
  nlohmann::json state = loader_->state().to_json();
  state["seq_length"] = train_.seq_length();
  state["train_sequences"] = train_.size();
  return state;
}

void DataLoaderBatchSource::load_state_dict(const nlohmann::json& state) {
  const DataLoaderState position = DataLoaderState::from_json(state, "data state");
  // The position only means the same batches over the same sequences.
  using Expected = std::pair<const char*, int64_t>;
  for (const auto& [key, expected] :
       {Expected{"seq_length", train_.seq_length()}, Expected{"train_sequences", train_.size()}}) {
    if (!state.contains(key) || !state[key].is_number_integer()) {
      throw ValueError(str_cat("data state: '", key, "' is missing or not an integer"));
    }
    if (state[key].get<int64_t>() != expected) {
      throw ValueError(str_cat("data state: ", key, " ", state[key].get<int64_t>(),
                               " differs from this run's ", expected,
                               " (other data or max_seq_length)"));
    }
  }
  loader_ = std::make_unique<DataLoader>(train_, options_, position);
}

std::unique_ptr<BatchSource> make_data_loader_batch_source(const TrainingArguments& args,
                                                           const Tokenizer& tokenizer,
                                                           int64_t window, Device device) {
  if (args.data.empty()) throw ValueError("data: no training data given");
  const std::string cache_dir = (std::filesystem::path(args.output_dir) / "cache").string();
  std::shared_ptr<const TokenCorpus> corpus = load_token_corpus(
      args.data, tokenizer, {.cache_dir = cache_dir, .output_dir = args.output_dir});
  if (const std::string note = skipped_note(args.data, corpus->skipped()); !note.empty()) {
    std::fprintf(stderr, "headroom: %s\n", note.c_str());
  }
  DataLoaderOptions options;
  options.batch_size = args.per_device_train_batch_size;
  options.shuffle = true;
  options.seed = static_cast<uint64_t>(args.data_seed.value_or(args.seed));
  options.drop_last = args.dataloader_drop_last;
  options.num_workers = args.dataloader_num_workers;
  options.prefetch_factor = args.dataloader_prefetch_factor;
  options.persistent_workers = args.dataloader_persistent_workers;
  options.pin_memory = args.dataloader_pin_memory;
  return std::make_unique<DataLoaderBatchSource>(
      split_train_eval(std::move(corpus), window - 1, args.validation_split_percentage), options,
      args.max_eval_samples, device);
}

}  // namespace headroom
