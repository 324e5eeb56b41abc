// OffloadedOptimizer: the optimizer's step on host copies of the parameters (Note [Optimizer
// offload]).
#include "optim/optimizer_offload.h"

#include <cmath>
#include <optional>

#include "autograd/accumulate_grad.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/storage.h"
#include "memory/host_pool.h"
#include "memory/memory_category.h"

namespace headroom {
namespace {

constexpr const char* kHostPrefix = "host.";
constexpr const char* kDevicePrefix = "device.";

OptimizerStateDict prefixed(const OptimizerStateDict& state, const std::string& prefix) {
  OptimizerStateDict out;
  for (const auto& [name, tensor] : state.tensors) out.tensors.emplace_back(prefix + name, tensor);
  return out;
}

// The entries of `state` under `prefix`, without it; meta from state.meta[key].
OptimizerStateDict unprefixed(const OptimizerStateDict& state, const std::string& prefix,
                              const std::string& key) {
  OptimizerStateDict out;
  if (!state.meta.contains(key)) {
    throw ValueError(str_cat("optimizer state: no '", key,
                             "' entry; the checkpoint was not "
                             "written with the same offload_optimizer_ratio"));
  }
  out.meta = state.meta[key];
  for (const auto& [name, tensor] : state.tensors) {
    if (name.rfind(prefix, 0) == 0) out.tensors.emplace_back(name.substr(prefix.size()), tensor);
  }
  return out;
}

}  // namespace

OffloadedOptimizer::OffloadedOptimizer(std::vector<NamedTensor> params, Device compute,
                                       const MakeOptimizer& make,
                                       const OptimizerOffloadOptions& options)
    : compute_(compute), pool_(&host_pool(compute, options.pin_memory)), ratio_(options.ratio) {
  if (!(options.ratio >= 0.0 && options.ratio <= 1.0)) {
    throw ValueError(str_cat("offload_optimizer_ratio: ", options.ratio, " is not in [0, 1]"));
  }
  int64_t total = 0;
  auto in_pool = [this](const Tensor& p) { return p.storage()->allocator() == pool_; };
  for (const auto& [name, p] : params) {
    if (p.device() != compute && !in_pool(p)) {
      throw ValueError(str_cat("offload_optimizer: parameter ", name, " is on ", p.device(),
                               ", not on the compute device ", compute));
    }
    total += p.numel();
  }
  const double limit = options.ratio * static_cast<double>(total);
  std::vector<NamedTensor> host_params, device_params;
  {
    HostPoolScope scope(compute, *pool_);
    MemoryCategoryScope category(MemoryCategory::parameters);
    NoGradGuard no_grad;
    for (const auto& [name, p] : params) {
      if (in_pool(p)) {
        // Already on the host (parameter offload, Note [Parameter offload]): stepped as it is.
        host_params.emplace_back(name, p);
        offloaded_elements_ += p.numel();
        continue;
      }
      if (!(static_cast<double>(offloaded_elements_) < limit)) {
        device_params.emplace_back(name, p);
        continue;
      }
      auto entry = std::make_unique<Offloaded>();
      entry->device_param = p;
      entry->host_param = Tensor::empty(p.shape(), p.dtype(), host_pool_device(compute));
      entry->host_param.copy_(p);
      offloaded_elements_ += p.numel();
      host_params.emplace_back(name, entry->host_param);
      offloaded_.push_back(std::move(entry));
    }
    if (!host_params.empty()) host_ = make(host_params);
  }
  if (!device_params.empty()) device_ = make(device_params);
  for (std::unique_ptr<Offloaded>& entry : offloaded_) {
    if (!options.gradients_from_hooks) break;
    Offloaded* e = entry.get();
    e->hook = register_post_accumulate_grad_hook(e->device_param,
                                                 [this, e](const Tensor&) { gradient_ready(*e); });
  }
  if (host_) groups_ = host_->param_groups();
  if (device_) {
    for (const ParamGroup& group : device_->param_groups()) groups_.push_back(group);
  }
}

OffloadedOptimizer::~OffloadedOptimizer() {
  for (std::unique_ptr<Offloaded>& entry : offloaded_) {
    if (entry->hook >= 0) remove_post_accumulate_grad_hook(entry->device_param, entry->hook);
  }
}

void OffloadedOptimizer::gradient_ready(Offloaded& entry) {
  const Tensor grad = entry.device_param.grad();
  if (!grad.defined()) return;
  {
    HostPoolScope scope(compute_, *pool_);
    MemoryCategoryScope category(MemoryCategory::gradients);
    NoGradGuard no_grad;
    const Device host = host_pool_device(compute_);
    const Tensor host_grad = entry.host_param.grad();
    if (!host_grad.defined()) {
      Tensor copy = Tensor::empty(grad.shape(), grad.dtype(), host);
      copy.copy_(grad);
      entry.host_param.set_grad(copy);
    } else {
      // A later micro-batch: added on the host in the gradient's dtype, as AccumulateGrad adds.
      Tensor staged = Tensor::empty(grad.shape(), grad.dtype(), host);
      staged.copy_(grad);
      host_grad.add_(staged);
    }
  }
  entry.device_param.set_grad(Tensor());  // the device keeps no gradient
}

void OffloadedOptimizer::take_gradients() {
  for (std::unique_ptr<Offloaded>& entry : offloaded_) gradient_ready(*entry);
}

void OffloadedOptimizer::sync_group_lrs() {
  // The scheduler sets the learning rates on this optimizer's groups: host groups first.
  size_t g = 0;
  if (host_) {
    for (size_t i = 0; i < host_->param_groups().size(); ++i) host_->set_group_lr(i, group_lr(g++));
  }
  if (device_) {
    for (size_t i = 0; i < device_->param_groups().size(); ++i) {
      device_->set_group_lr(i, group_lr(g++));
    }
  }
}

void OffloadedOptimizer::step() {
  sync_group_lrs();
  if (host_) {
    HostPoolScope scope(compute_, *pool_);
    MemoryCategoryScope category(MemoryCategory::optimizer_states);
    host_->step();
  }
  if (device_) device_->step();
  // The updated parameters return to the device.
  NoGradGuard no_grad;
  for (const std::unique_ptr<Offloaded>& entry : offloaded_) {
    entry->device_param.detach().copy_(entry->host_param);
  }
}

void OffloadedOptimizer::zero_grad(bool set_to_none) {
  if (host_) host_->zero_grad(set_to_none);
  if (device_) device_->zero_grad(set_to_none);
  for (const std::unique_ptr<Offloaded>& entry : offloaded_) entry->device_param.set_grad(Tensor());
}

std::string OffloadedOptimizer::name() const { return (host_ ? host_ : device_)->name(); }

OptimizerStateDict OffloadedOptimizer::state_dict() const {
  if (!device_) return host_->state_dict();
  if (!host_) return device_->state_dict();
  OptimizerStateDict host = host_->state_dict(), device = device_->state_dict();
  OptimizerStateDict out = prefixed(host, kHostPrefix);
  for (auto& named : prefixed(device, kDevicePrefix).tensors) out.tensors.push_back(named);
  out.meta = {{"optimizer", name()},
              {"offload_optimizer_ratio", ratio_},
              {"host", host.meta},
              {"device", device.meta}};
  return out;
}

void OffloadedOptimizer::load_state_dict(const OptimizerStateDict& state) {
  // A checkpoint loads the weights into the device parameters first: the host copies follow.
  {
    NoGradGuard no_grad;
    for (const std::unique_ptr<Offloaded>& entry : offloaded_) {
      entry->host_param.copy_(entry->device_param);
    }
  }
  if (!device_ || !host_) {
    Optimizer& only = host_ ? *host_ : *device_;
    std::optional<HostPoolScope> scope;
    if (host_) scope.emplace(compute_, *pool_);
    MemoryCategoryScope category(MemoryCategory::optimizer_states);
    only.load_state_dict(state);
  } else {
    {
      HostPoolScope scope(compute_, *pool_);
      MemoryCategoryScope category(MemoryCategory::optimizer_states);
      host_->load_state_dict(unprefixed(state, kHostPrefix, "host"));
    }
    device_->load_state_dict(unprefixed(state, kDevicePrefix, "device"));
  }
  // The learning rates restored into the inner optimizers become this one's.
  size_t g = 0;
  for (Optimizer* inner : {host_.get(), device_.get()}) {
    if (!inner) continue;
    for (size_t i = 0; i < inner->param_groups().size(); ++i) set_group_lr(g++, inner->group_lr(i));
  }
}

}  // namespace headroom
