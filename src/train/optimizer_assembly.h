// The optimizer a run steps, assembled from its typed config: HF's optimizer over the trainable
// parameters, offloaded to the host (ZeRO-Offload), or each rank's share of it (ZeRO-1/2/3).
#pragma once

#include <memory>
#include <vector>

#include "dist/communicator.h"
#include "optim/optimizer.h"
#include "train/training_config.h"

namespace headroom {

class OffloadedOptimizer;  // optim/optimizer_offload.h

struct AssembledOptimizer {
  std::unique_ptr<Optimizer> optimizer;
  OffloadedOptimizer* offloaded = nullptr;  // the one that offloads (optimizer, or its share)
  // What clip_grad_norm_ folds in the model's order (HF Trainer clips model.parameters()), the
  // optimizer's tensors; empty under ZeRO, whose optimizer clips its shares in that order.
  std::vector<Tensor> clip_params;
  std::vector<int> gradient_owners;  // ZeRO-2 and 3: each gradient's owner; empty: all-reduced
};

// The optimizer of `config` over `trainable` (the model's parameters that require grad, in its
// order) on `device`, offloading as `offload` says; `communicator` (data parallel, or null)
// shards it under ZeRO (config.zero_stage >= 1). ValueError for offload_optimizer with an
// optimizer that updates in backward, and make_optimizer's.
AssembledOptimizer assemble_optimizer(const TrainingConfig& config,
                                      const std::vector<NamedTensor>& trainable,
                                      const OffloadSettings& offload, Device device,
                                      const std::shared_ptr<Communicator>& communicator);

}  // namespace headroom
