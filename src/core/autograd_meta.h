// What autograd keeps with a tensor: whether it requires grad, its .grad, the node that produced
// it and the hooks run after its gradient is accumulated. Every copy of a Tensor handle shares it;
// views made by Tensor's own methods are new tensors without it (autograd-aware views are ops).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace headroom {

class Node;

// Runs after a leaf's gradient has been accumulated into its .grad during backward. See
// Note [Post-accumulate-grad hooks] in autograd/accumulate_grad.h.
using PostAccumulateGradHook = std::function<void(const Tensor& param)>;

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  // The node whose output this tensor is (null for leaves) and which of its outputs.
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  // A leaf's AccumulateGrad node, created on first use by an op. Weak, because the graph owns
  // it and the node holds the leaf.
  std::weak_ptr<Node> grad_accumulator;
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate_grad_hooks;
  int next_hook_id = 0;
};

}  // namespace headroom
