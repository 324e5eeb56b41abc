// The Trainer's data-parallel start: DDP's broadcast and gradient reducer, ZeRO-3's sharding.
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

}  // namespace headroom
