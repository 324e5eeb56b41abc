// The node at the end of every path to a leaf: it adds the incoming gradient into the leaf's
// .grad and then runs the leaf's post-accumulate-grad hooks.
#pragma once

#include "autograd/node.h"
#include "core/autograd_meta.h"

namespace headroom {

// Note [Post-accumulate-grad hooks]
// A hook registered on a leaf runs right after backward has added a gradient into its .grad,
// with the leaf itself as argument (torch.Tensor.register_post_accumulate_grad_hook). The engine
// runs AccumulateGrad nodes as soon as they are ready, so a hook sees each parameter's final
// gradient for this backward while the rest of backward still runs: LOMO applies the update and
// drops .grad there (no full set of gradients ever exists), data-parallel training starts the
// all-reduce of a bucket there, offload copies the gradient to the host there. A hook may replace
// or drop .grad (set_grad) and may change the leaf's data under NoGradGuard.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& variable);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  const Tensor& variable() const { return variable_; }

 private:
  Tensor variable_;  // shares the leaf's AutogradMeta
};

// Returns a handle for remove_post_accumulate_grad_hook. The leaf must require grad.
int register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);
void remove_post_accumulate_grad_hook(const Tensor& leaf, int handle);

}  // namespace headroom
