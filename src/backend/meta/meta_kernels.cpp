// The meta device's kernels: they do nothing, because meta tensors have addresses but no data.
// With them every Tensor operation runs on meta and only the allocator sees its effect, which is
// how a training step is dry-run for its memory. Its op kernel tables are no-ops likewise.
#include "backend/backend.h"
#include "core/device_kernels.h"
#include "core/error.h"
#include "memory/device_allocator.h"

namespace headroom::meta {
namespace {

// meta:1 is a scratch meta device: load_pretrained builds a model there before its tensors are
// materialized one at a time (io/pretrained.h), so that its construction counts in no plan.
std::unique_ptr<DeviceAllocator> make_allocator(int index) {
  if (index != 0 && index != 1) {
    throw ValueError(str_cat("device meta:", index, " does not exist; use meta"));
  }
  return make_meta_device_allocator();
}

const DeviceKernels& tensor_kernels() {
  static const DeviceKernels kernels = [] {
    DeviceKernels k;
    k.fill = [](const Tensor&, double) {};
    k.copy = [](const Tensor&, const Tensor&, Overflow) {};
    k.accumulate = [](const Tensor&, const Tensor&) {};
    k.arange = [](const Tensor&, double, double) {};
    k.uniform = [](const Tensor&, PhiloxState, double, double) {};
    k.normal = [](const Tensor&, PhiloxState, double, double) {};
    k.has_op_kernels = true;  // the ops allocate their outputs and skip the compute
    return k;
  }();
  return kernels;
}

const bool kRegistered = [] {
  Backend backend{DeviceType::meta};
  backend.allocator = make_allocator;
  backend.tensor_kernels = &tensor_kernels();
  backend.kernels = noop_kernel_tables();
  register_backend(backend);
  return true;
}();

}  // namespace
}  // namespace headroom::meta
