// Tensor's autograd accessors. The graph itself (nodes, engine, hooks) lives in autograd/.
#include "core/autograd_meta.h"
#include "core/error.h"
#include "core/tensor.h"

namespace headroom {

bool Tensor::requires_grad() const { return autograd_meta_ && autograd_meta_->requires_grad; }

AutogradMeta& Tensor::ensure_autograd_meta() const {
  if (!autograd_meta_) autograd_meta_ = std::make_shared<AutogradMeta>();
  return *autograd_meta_;
}

const Tensor& Tensor::set_requires_grad(bool requires_grad) const {
  check_defined("set_requires_grad");
  if (!is_leaf()) {
    throw Error(
        "set_requires_grad: only leaf tensors can change requires_grad; this one was produced "
        "by an op (use detach() for a leaf that shares its data)");
  }
  if (requires_grad && !is_floating(dtype_)) {
    throw ValueError(str_cat("set_requires_grad: only floating tensors can require gradients, not ",
                             dtype_name(dtype_)));
  }
  if (requires_grad || autograd_meta_) ensure_autograd_meta().requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const { return autograd_meta_ ? autograd_meta_->grad : Tensor(); }

void Tensor::set_grad(const Tensor& grad) const {
  check_defined("set_grad");
  if (grad.defined()) {
    if (grad.shape() != shape_) {
      throw ValueError(str_cat("set_grad: gradient shape ", grad.shape(),
                               " does not match the tensor's ", shape_));
    }
    if (grad.device() != device()) {
      throw ValueError(str_cat("set_grad: gradient on ", grad.device(), ", tensor on ", device()));
    }
  } else if (!autograd_meta_) {
    return;
  }
  ensure_autograd_meta().grad = grad;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return autograd_meta_ ? autograd_meta_->grad_fn : none;
}

Tensor Tensor::detach() const {
  Tensor out = *this;
  out.autograd_meta_ = std::make_shared<AutogradMeta>();
  return out;
}

}  // namespace headroom
