// Device and dtype helpers shared by the ops.
#include "ops/op_support.h"

#include "core/error.h"

namespace headroom {

Tensor contiguous_as(const Tensor& tensor, DType dtype) {
  if (tensor.dtype() == dtype) return tensor.contiguous();
  return tensor.to(dtype).contiguous();
}

void check_floating(const char* op, const char* argument, const Tensor& tensor) {
  if (!tensor.defined()) throw ValueError(str_cat(op, ": ", argument, " is undefined"));
  if (!is_floating(tensor.dtype())) {
    throw ValueError(
        str_cat(op, ": ", argument, " must be floating, not ", dtype_name(tensor.dtype())));
  }
}

void check_same_device(const char* op, const std::vector<Tensor>& tensors) {
  const Tensor* first = nullptr;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
    } else if (t.device() != first->device()) {
      throw ValueError(str_cat(op, ": tensors on ", first->device(), " and ", t.device()));
    }
  }
}

}  // namespace headroom
