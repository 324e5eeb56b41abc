// Sequence numbers and gradient edges.
#include "autograd/node.h"

#include "autograd/accumulate_grad.h"
#include "core/autograd_meta.h"
#include "core/grad_mode.h"

namespace headroom {

namespace {
thread_local uint64_t next_sequence_nr = 0;
}

Node::Node() : sequence_nr_(next_sequence_nr++) {}

Edge gradient_edge(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.requires_grad()) return {};
  AutogradMeta& meta = *tensor.autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<Node> accumulator = meta.grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(tensor);
    meta.grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

bool any_requires_grad(const std::vector<Tensor>& tensors) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : tensors) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

}  // namespace headroom
