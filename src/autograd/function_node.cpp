// FunctionNode: recording an op's backward and checking the gradients it returns.
#include "autograd/function_node.h"

#include "core/autograd_meta.h"
#include "core/error.h"

namespace headroom {

Tensor BackwardContext::saved(size_t i) const {
  if (i >= is_unpacked_.size()) {
    unpacked_.resize(i + 1);
    is_unpacked_.resize(i + 1, false);
  }
  if (!is_unpacked_[i]) {
    unpacked_[i] = node_.unpack_saved(i);
    is_unpacked_[i] = true;
  }
  return unpacked_[i];
}

bool BackwardContext::needs_input_grad(size_t i) const { return node_.needs_input_grad(i); }

bool BackwardContext::retains_saved() const { return node_.retains_saved(); }

DType BackwardContext::grad_dtype(size_t i) const { return node_.grad_dtype(i); }

Tensor BackwardContext::take_partial_gradient(size_t i, DType dtype, const Shape& shape) {
  std::vector<Tensor>* partial = node_.partial_gradients();
  if (!partial || i >= partial->size()) return Tensor();
  Tensor& t = (*partial)[i];
  if (!t.defined() || t.dtype() != dtype || t.shape() != shape) return Tensor();
  return std::move(t);
}

FunctionNode::FunctionNode(std::string name, const std::vector<Tensor>& inputs)
    : name_(std::move(name)) {
  next_edges_.reserve(inputs.size());
  inputs_.reserve(inputs.size());
  for (const Tensor& input : inputs) {
    next_edges_.push_back(gradient_edge(input));
    if (input.defined()) {
      DType grad_dtype = input.dtype();
      if (const auto* cast = dynamic_cast<const FunctionNode*>(next_edges_.back().node.get())) {
        grad_dtype = cast->accepted_grad_dtype().value_or(grad_dtype);
      }
      inputs_.push_back({input.shape(), input.dtype(), input.device(), grad_dtype});
    } else {
      inputs_.push_back({Shape{}, DType::f32, kCPU, DType::f32});
    }
  }
}

size_t FunctionNode::save(const Tensor& tensor) {
  saved_.emplace_back(tensor);
  return saved_.size() - 1;
}

Tensor FunctionNode::unpack_saved(size_t i) const {
  if (i >= saved_.size()) {
    throw IndexError(str_cat(name_, ": saved tensor ", i, " of ", saved_.size()));
  }
  return saved_[i].unpack(name_);
}

void FunctionNode::set_outputs(const std::vector<Tensor>& outputs) {
  num_outputs_ = static_cast<uint32_t>(outputs.size());
  // The node holds no reference to its outputs, only they to it: no cycle.
  const std::shared_ptr<Node> self = shared_from_this();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].autograd_meta() && outputs[i].grad_fn()) {
      throw Error(str_cat(name_, ": output ", i, " already has a grad_fn"));
    }
    AutogradMeta& meta = outputs[i].ensure_autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = self;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grad_outputs) {
  if (!backward_) throw Error(str_cat(name_, ": no backward function was set"));
  for (const SavedTensor& s : saved_) {
    if (s.released()) s.unpack(name_);  // throws the "backward a second time" error
  }
  BackwardContext ctx(*this, grad_outputs);
  std::vector<Tensor> grads = backward_(ctx);
  if (grads.size() != inputs_.size()) {
    throw Error(str_cat(name_, ": backward returned ", grads.size(), " gradients for ",
                        inputs_.size(), " inputs"));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!needs_input_grad(i)) {
      grads[i] = Tensor();
      continue;
    }
    if (!grads[i].defined()) continue;
    const InputInfo& in = inputs_[i];
    if (grads[i].shape() != in.shape) {
      throw Error(str_cat(name_, ": gradient ", i, " has shape ", grads[i].shape(),
                          " but the input has shape ", in.shape));
    }
    if (grads[i].device() != in.device) {
      throw Error(str_cat(name_, ": gradient ", i, " is on ", grads[i].device(),
                          " but the input is on ", in.device));
    }
    if (grads[i].dtype() != in.dtype && grads[i].dtype() != in.grad_dtype) {
      grads[i] = grads[i].to(in.dtype);
    }
  }
  return grads;
}

void FunctionNode::release_saved() {
  for (SavedTensor& s : saved_) s.release();
}

std::shared_ptr<FunctionNode> make_function_node(std::string name,
                                                 const std::vector<Tensor>& inputs) {
  if (!any_requires_grad(inputs)) return nullptr;
  return std::make_shared<FunctionNode>(std::move(name), inputs);
}

}  // namespace headroom
