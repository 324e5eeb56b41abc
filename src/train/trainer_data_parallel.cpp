// The Trainer across ranks: DDP's broadcast and gradient reducer, ZeRO-3's sharding, and the
// micro-batches' weights over every rank's scored targets.
#include "train/trainer.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "dist/gradient_reducer.h"
#include "dist/zero_optimizer.h"
#include "dist/zero_parameters.h"

namespace headroom {

void Trainer::start_data_parallel(const std::vector<NamedTensor>& trainable,
                                  std::vector<int> gradient_owners) {
  if (optimizer_->updates_in_backward()) {
    throw NotImplementedError(str_cat("optim ", optimizer_->name(), " with ",
                                      communicator_->world_size(),
                                      " data-parallel ranks: it "
                                      "updates inside backward, before gradients could be "
                                      "averaged over the ranks"));
  }
  // DDP's start: every rank trains rank 0's model (the same seed makes the same one; this
  // makes sure of it), frozen weights included.
  // Under ZeRO-3 a block parameter is its owner's alone (Note [ZeRO-3 parameter sharding]).
  std::vector<Tensor> whole;
  for (const auto& [name, p] : model_->named_parameters()) {
    if (config_.zero_stage < 3 || !is_block_parameter(*model_, name)) whole.push_back(p);
  }
  broadcast_parameters(*communicator_, whole);
  GradientBucketOptions buckets;
  buckets.bucket_cap_bytes = static_cast<int64_t>(args_.ddp_bucket_cap_mb * (1 << 20));
  buckets.first_bucket_cap_bytes =
      std::min(buckets.first_bucket_cap_bytes, buckets.bucket_cap_bytes);
  const std::vector<int> owners = gradient_owners;
  reducer_ = std::make_unique<GradientReducer>(communicator_, trainable, buckets,
                                               std::move(gradient_owners));
  if (config_.zero_stage >= 3) shard_parameters(trainable, owners);
}

void Trainer::shard_parameters(const std::vector<std::pair<std::string, Tensor>>& trainable,
                               const std::vector<int>& owners) {
  // Note [ZeRO-3 parameter sharding]: a trainable block parameter lives on the rank whose
  // optimizer updates it; a frozen one (LoRA's base) is shared out by the same rule on its own.
  std::unordered_map<std::string, int> by_name;
  for (size_t i = 0; i < trainable.size(); ++i) by_name[trainable[i].first] = owners.at(i);
  std::vector<std::string> frozen_names;
  std::vector<Tensor> frozen;
  for (auto& [name, p] : model_->named_parameters()) {
    if (p.requires_grad()) continue;
    frozen_names.push_back(name);
    frozen.push_back(p);
  }
  const std::vector<int> frozen_owners = partition_parameters(frozen, communicator_->world_size());
  for (size_t i = 0; i < frozen.size(); ++i) by_name[frozen_names[i]] = frozen_owners[i];
  zero_parameters_ = ZeroParameterSharding::enable(*model_, communicator_, by_name);
  // The blocks' trainable parameters stay with their owners; the rest is broadcast after a step.
  std::vector<bool> sharded;
  for (const auto& [name, p] : trainable) sharded.push_back(is_block_parameter(*model_, name));
  dynamic_cast<ZeroRedundancyOptimizer&>(*optimizer_).set_sharded(std::move(sharded));
}

void Trainer::weigh_micro_batches(const TokenBatch& first, std::vector<TokenBatch>& ahead,
                                  std::vector<double>& weights) {
  ahead.resize(weights.size());
  int64_t scored = first.target_count;
  bool counted = true;
  for (size_t n = 1; n < ahead.size(); ++n) {
    ahead[n] = data_->next_batch();
    scored += ahead[n].target_count;
    counted = counted && ahead[n].target_count >= 0;
  }
  // Every rank reduces, counted or not, so that none waits on another for ever.
  double total = counted ? static_cast<double>(scored) : 0.0;
  double ranks = 1.0;
  if (communicator_ && args_.average_tokens_across_devices) {
    const double uncounted = communicator_->all_reduce_scalar(counted ? 0.0 : 1.0, ReduceOp::max);
    total = communicator_->all_reduce_scalar(total, ReduceOp::sum);
    if (uncounted > 0.0) return;
    ranks = static_cast<double>(communicator_->world_size());
  }
  if (!counted || total <= 0.0) return;
  for (size_t n = 0; n < ahead.size(); ++n) {
    const int64_t count = n == 0 ? first.target_count : ahead[n].target_count;
    weights[n] = static_cast<double>(count) / total * ranks;
  }
}

}  // namespace headroom
