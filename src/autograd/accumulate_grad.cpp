// Gradient accumulation into leaves (+=, so gradient accumulation over micro-batches works).
#include "autograd/accumulate_grad.h"

#include <algorithm>

#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/device_memory.h"

namespace headroom {

AccumulateGrad::AccumulateGrad(const Tensor& variable)
    : Node(std::numeric_limits<uint64_t>::max()), variable_(variable) {}

namespace {

// True when nothing else refers to the gradient's memory, so .grad may take it over instead of
// copying it (as PyTorch steals the incoming buffer).
bool can_steal(const Tensor& grad, const Tensor& variable) {
  return grad.storage().use_count() == 1 && grad.is_contiguous() &&
         grad.dtype() == variable.dtype() && grad.storage_offset() == 0 &&
         grad.nbytes() == grad.storage()->nbytes();
}

}  // namespace

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  Tensor incoming = std::move(grad_outputs.at(0));
  grad_outputs.clear();
  if (!incoming.defined()) return {};
  NoGradGuard no_grad;
  AutogradMeta& meta = variable_.ensure_autograd_meta();
  if (incoming.shape() != variable_.shape()) {
    throw Error(str_cat("AccumulateGrad: gradient of shape ", incoming.shape(),
                        " for a leaf of shape ", variable_.shape()));
  }
  if (!meta.grad.defined()) {
    if (can_steal(incoming, variable_)) {
      meta.grad = std::move(incoming).detach();
    } else {
      Tensor grad = Tensor::empty(variable_.shape(), variable_.dtype(), variable_.device());
      grad.copy_(incoming);
      meta.grad = std::move(grad);
    }
    // A stolen buffer was backward's temporary until now.
    tag_memory(meta.grad, MemoryCategory::gradients);
  } else {
    meta.grad.add_(incoming);
  }
  incoming = Tensor();
  // Copy: a hook may remove hooks.
  const auto hooks = meta.post_accumulate_grad_hooks;
  for (const auto& [id, hook] : hooks) hook(variable_);
  return {};
}

int register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  if (!leaf.defined() || !leaf.requires_grad() || !leaf.is_leaf()) {
    throw ValueError(
        "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad");
  }
  AutogradMeta& meta = leaf.ensure_autograd_meta();
  const int id = meta.next_hook_id++;
  meta.post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return id;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, int handle) {
  AutogradMeta* meta = leaf.autograd_meta();
  if (!meta) return;
  auto& hooks = meta->post_accumulate_grad_hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                             [&](const auto& entry) { return entry.first == handle; }),
              hooks.end());
}

}  // namespace headroom
