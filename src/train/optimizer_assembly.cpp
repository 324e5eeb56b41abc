// assemble_optimizer: the optimizer half of a run's setup.
#include "train/optimizer_assembly.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "core/error.h"
#include "dist/zero_optimizer.h"
#include "optim/optimizer_factory.h"
#include "optim/optimizer_offload.h"

namespace headroom {

AssembledOptimizer assemble_optimizer(const TrainingConfig& config,
                                      const std::vector<NamedTensor>& trainable,
                                      const OffloadSettings& offload, Device device,
                                      const std::shared_ptr<Communicator>& communicator) {
  // Optimizers: the single call site, with the arguments resolve_training_config typed.
  const OptimizerArguments& options = config.optimizer_arguments;
  AssembledOptimizer out;
  // Data parallel: the offloaded optimizer takes the gradients after their reduction (train_step),
  // not from backward's hooks, which would move them before the ranks have averaged them.
  const OptimizerOffloadOptions offload_options{.ratio = offload.optimizer_ratio,
                                                .pin_memory = offload.pin_memory,
                                                .gradients_from_hooks = !communicator};
  auto make_offloaded = [&](const std::vector<NamedTensor>& params) {
    auto offloaded = std::make_unique<OffloadedOptimizer>(
        params, device,
        [&](const std::vector<NamedTensor>& share) { return make_optimizer(options, share); },
        offload_options);
    out.offloaded = offloaded.get();
    if (offloaded->updates_in_backward()) {
      throw ValueError(str_cat("offload_optimizer with optim ", offloaded->name(),
                               ": it updates inside backward and keeps no states to offload"));
    }
    return offloaded;
  };
  if (communicator && config.zero_stage >= 1) {
    // ZeRO-Offload: each rank offloads its share's optimizer.
    auto zero = std::make_unique<ZeroRedundancyOptimizer>(
        communicator, trainable, [&](const std::vector<NamedTensor>& share) {
          return offload.optimizer ? std::unique_ptr<Optimizer>(make_offloaded(share))
                                   : make_optimizer(options, share);
        });
    // ZeRO-2 and 3: each gradient is reduced to its owner alone (Note [ZeRO-2 gradient
    // reduction]).
    if (config.zero_stage >= 2) out.gradient_owners = zero->owners();
    out.optimizer = std::move(zero);
  } else {
    out.optimizer = offload.optimizer ? std::unique_ptr<Optimizer>(make_offloaded(trainable))
                                      : make_optimizer(options, trainable);
    std::map<std::string, size_t> order;
    for (size_t i = 0; i < trainable.size(); ++i) order[trainable[i].first] = i;
    std::vector<std::pair<size_t, Tensor>> ordered;
    for (const ParamGroup& group : out.optimizer->param_groups()) {
      for (const auto& [name, p] : group.params) ordered.emplace_back(order.at(name), p);
    }
    std::sort(ordered.begin(), ordered.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [i, p] : ordered) out.clip_params.push_back(p);
  }
  return out;
}

}  // namespace headroom
