// The node every op records: a backward function, the tensors it saved, and the shapes and
// dtypes of its inputs (to check the gradients it returns). An op records one like this:
//
//   if (auto node = make_function_node("GeluBackward0", {x})) {
//     node->save(x);                                      // ctx.saved(0) in backward
//     node->set_backward([](BackwardContext& ctx) -> std::vector<Tensor> {
//       return {gelu_backward(ctx.grad_output(), ctx.saved(0))};
//     });
//     node->set_outputs({out});
//   }
//
// The backward lambda must capture no tensors (save them instead), so that they are released as
// soon as backward has used them; see Note [Saved tensors are released after use].
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "autograd/saved_tensor.h"

namespace headroom {

class FunctionNode;

class BackwardContext {
 public:
  BackwardContext(const FunctionNode& node, std::vector<Tensor>& grad_outputs)
      : node_(node), grad_outputs_(grad_outputs) {}
  // Gradient of output i; undefined when none flowed to it (only for multi-output ops).
  const Tensor& grad_output(size_t i = 0) const { return grad_outputs_.at(i); }
  // Moves the gradient out, for backwards that can reuse its buffer.
  Tensor take_grad_output(size_t i = 0) { return std::move(grad_outputs_.at(i)); }
  // Saved tensor i, unpacked on first use and then reused for the rest of this backward: each
  // saved tensor is unpacked once per backward pass (as torch's ctx.saved_tensors), which
  // activation checkpointing relies on to free a recomputed tensor once its node has it.
  Tensor saved(size_t i) const;
  bool needs_input_grad(size_t i) const;
  // False when the saved tensors are released right after this backward (no retain_graph): the
  // backward may then overwrite a saved buffer that only it reads and hand it on as a gradient.
  bool retains_saved() const;
  // The dtype input i's gradient may be returned in: the input's own, or the wider one its
  // producer accepts (FunctionNode::accept_grad_in): for a narrowing cast (an autocast copy of
  // an fp32 parameter or activation) the dtype it was cast from. A GEMM then writes the wide
  // gradient directly, and the cast's backward has nothing to do: one rounding and one launch
  // fewer than rounding to the narrow dtype and widening again.
  DType grad_dtype(size_t i) const;
  // The gradient already summed for input i (Note [Partial gradients] in autograd/node.h) when
  // it is contiguous `dtype` of `shape`, moved out to be returned with this backward's gradient
  // added into it; undefined (and left to the engine) otherwise.
  Tensor take_partial_gradient(size_t i, DType dtype, const Shape& shape);

 private:
  const FunctionNode& node_;
  std::vector<Tensor>& grad_outputs_;
  mutable std::vector<Tensor> unpacked_;
  mutable std::vector<bool> is_unpacked_;
};

using BackwardFn = std::function<std::vector<Tensor>(BackwardContext& ctx)>;

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, const std::vector<Tensor>& inputs);

  std::string name() const override { return name_; }
  // Returns the index to pass to ctx.saved().
  size_t save(const Tensor& tensor);
  void set_backward(BackwardFn backward) { backward_ = std::move(backward); }
  // Makes these tensors the node's outputs (their grad_fn and output_nr) and marks them as
  // requiring grad. Call it on the op's fresh results before handing them out.
  void set_outputs(const std::vector<Tensor>& outputs);

  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  void release_saved() override;

  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].valid(); }
  Tensor unpack_saved(size_t i) const;
  DType grad_dtype(size_t i) const { return inputs_.at(i).grad_dtype; }

  // Marks this node as taking its output's gradient in `dtype` (wider than the output's) as well
  // as in the output's own: its consumers may then return that gradient wide (BackwardContext::
  // grad_dtype) and no cast is made between. A cast from `dtype` does (its backward widens
  // anyway), and dropout (its kernel reads any dtype). Set before the outputs are used.
  void accept_grad_in(DType dtype) { accepts_grad_in_ = dtype; }
  std::optional<DType> accepted_grad_dtype() const { return accepts_grad_in_; }

 private:
  struct InputInfo {
    Shape shape;
    DType dtype;
    Device device;
    DType grad_dtype;  // dtype, or the wider one the input's producer accepts
  };
  std::optional<DType> accepts_grad_in_;
  std::string name_;
  std::vector<InputInfo> inputs_;
  std::vector<SavedTensor> saved_;
  BackwardFn backward_;
};

// Null when grad mode is off or no input requires grad: the op then records nothing.
// Undefined inputs (an absent bias) are allowed and get no gradient. `name` is PyTorch's style
// of node name, <Op>Backward0, which errors and the profiler's trace show.
std::shared_ptr<FunctionNode> make_function_node(std::string name,
                                                 const std::vector<Tensor>& inputs);

}  // namespace headroom
