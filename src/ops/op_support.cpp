// Device and dtype helpers shared by the ops.
#include "ops/op_support.h"

#include "backend/cpu/denormals.h"
#include "core/error.h"

namespace headroom {

bool computes_on_cpu(const char* op, Device device) {
  switch (device.type) {
    case DeviceType::cpu:
      cpu::ensure_flush_denormal();
      return true;
    case DeviceType::meta:
      return false;
    default:
      throw NotImplementedError(str_cat(op, " has no kernel for ", device, " yet"));
  }
}

Tensor f32_contiguous(const Tensor& tensor) { return contiguous_as(tensor, DType::f32); }

Tensor contiguous_as(const Tensor& tensor, DType dtype) {
  if (tensor.dtype() == dtype) return tensor.contiguous();
  return tensor.to(dtype).contiguous();
}

bool all_bf16(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    if (t.defined() && t.dtype() != DType::bf16) return false;
  }
  return true;
}

Tensor to_dtype(const Tensor& result, DType dtype) {
  return result.dtype() == dtype ? result : result.to(dtype);
}

void check_floating(const char* op, const char* argument, const Tensor& tensor) {
  if (!tensor.defined()) throw ValueError(str_cat(op, ": ", argument, " is undefined"));
  if (!is_floating(tensor.dtype())) {
    throw ValueError(str_cat(op, ": ", argument, " must be floating, not ",
                             dtype_name(tensor.dtype())));
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
