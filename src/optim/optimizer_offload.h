// Optimizer offload (ZeRO-Offload on one device): the optimizer's states, and a copy of each
// parameter it updates, live in the host pool; gradients leave the compute device as backward
// produces them; the step runs on the host with the CPU kernels and the updated parameters
// return. See Note [Optimizer offload].
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "memory/caching_allocator.h"
#include "optim/optimizer.h"

namespace headroom {

// Note [Optimizer offload]
// For each offloaded parameter the host pool holds a copy in the parameter's own dtype (the
// "host parameter"; fp32 under fp32-master autocast, bf16 under pure bf16) that the real
// optimizer, built over the host parameters, updates with its CPU kernels; its states are made
// under HostPoolScope, so they come from the pool too. A post-accumulate-grad hook copies each
// gradient into the host parameter's .grad as soon as backward has produced it (adding it there
// on later micro-batches, in the gradient's dtype, as the device would have) and drops the
// device's, so the device never holds more than the gradients backward is producing. The
// optimizer's param_groups() are the host parameters (and the device parameters of the share
// that stays), so GradScaler.unscale_, found_inf and clipping act on the host gradients and
// behave as without offload. step() runs the host optimizer in the pool's scope, then copies
// each host parameter back into its device parameter. Every copy is exact and the kernels are
// the same, so on the CPU a run with offload equals one without bit for bit.
// `ratio` (DeepSpeed's offload_optimizer.ratio) offloads part of the parameters: in order, each
// while the offloaded elements so far are below ratio × all; the rest keep a second optimizer of
// the same kind on the device. Parameters already in the host pool (parameter offload) are
// stepped as they are, in the host share: their gradients arrive on the host.

struct OptimizerOffloadOptions {
  double ratio = 1.0;      // in [0, 1]
  bool pin_memory = true;  // page-locked host pool when the compute device is a GPU
  // false: no hooks; the caller moves the gradients with take_gradients() (data parallel: after
  // the ranks have reduced them, which the device's .grad must hold until then).
  bool gradients_from_hooks = true;
};

class OffloadedOptimizer final : public Optimizer {
 public:
  using MakeOptimizer =
      std::function<std::unique_ptr<Optimizer>(const std::vector<NamedTensor>& params)>;
  // `params` are the trainable parameters on `compute`; `make` builds the real optimizer over the
  // parameters it is given (called once for the host share, once for a device share if any).
  // ValueError for a ratio outside [0, 1] or a parameter neither on `compute` nor in the pool.
  OffloadedOptimizer(std::vector<NamedTensor> params, Device compute, const MakeOptimizer& make,
                     const OptimizerOffloadOptions& options = {});
  ~OffloadedOptimizer() override;

  void step() override;
  void zero_grad(bool set_to_none = true) override;
  std::string name() const override;
  bool updates_in_backward() const override {
    return (host_ ? host_ : device_)->updates_in_backward();
  }
  // ratio 1: the host optimizer's state_dict (the same entries as without offload, so a
  // checkpoint resumes with or without offload); a partial ratio: both optimizers', their
  // entries prefixed "host." and "device.". load_state_dict first copies the device parameters
  // into the host ones (a checkpoint has loaded the weights already).
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state) override;

  CachingAllocator& pool() const { return *pool_; }
  Device compute_device() const { return compute_; }
  // Elements of the parameters whose optimizer runs on the host.
  int64_t offloaded_elements() const { return offloaded_elements_; }
  // Moves every offloaded parameter's device gradient into its host parameter's .grad (added
  // there when one is held) and drops the device's; what the hooks do as backward produces each
  // (OptimizerOffloadOptions::gradients_from_hooks).
  void take_gradients();

 private:
  struct Offloaded {
    Tensor device_param;
    Tensor host_param;
    int hook = -1;
  };

  void gradient_ready(Offloaded& entry);
  void sync_group_lrs();

  Device compute_;
  CachingAllocator* pool_;
  double ratio_;
  std::vector<std::unique_ptr<Offloaded>> offloaded_;
  int64_t offloaded_elements_ = 0;
  std::unique_ptr<Optimizer> host_;
  std::unique_ptr<Optimizer> device_;  // the share that stays, null at ratio 1
};

}  // namespace headroom
