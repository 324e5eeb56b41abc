// Device and dtype helpers shared by the ops.
#include "ops/op_support.h"

#include <atomic>

#include "backend/backend.h"
#include "backend/cpu/denormals.h"
#include "core/error.h"

namespace headroom {

namespace {

std::atomic<DeviceType>& meta_pattern() {
  static std::atomic<DeviceType> pattern{DeviceType::cpu};
  return pattern;
}

}  // namespace

MetaAllocatesLike::MetaAllocatesLike(DeviceType like) : previous_(meta_pattern().exchange(like)) {}

MetaAllocatesLike::~MetaAllocatesLike() { meta_pattern().store(previous_); }

DeviceType meta_allocates_like() { return meta_pattern().load(); }

OpRoute op_route(const char* op, Device device) {
  OpRoute route;
  route.op = op;
  route.where = device;
  switch (device.type) {
    case DeviceType::cpu:
      cpu::ensure_flush_denormal();
      route.cpu = true;
      return route;
    case DeviceType::meta:
      route.native = meta_allocates_like() != DeviceType::cpu;
      return route;
    default:
      route.kernels = find_kernel_tables(device.type) != nullptr;
      if (!route.kernels) throw NotImplementedError(str_cat(op, " has no kernel for ", device, " yet"));
      route.native = true;
      return route;
  }
}

bool computes_on_cpu(const char* op, Device device) {
  switch (device.type) {
    case DeviceType::cpu:
      cpu::ensure_flush_denormal();
      return true;
    case DeviceType::meta:
      return false;
    default:
      // A native device's ops go through op_route; one that reaches here has no such path.
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
