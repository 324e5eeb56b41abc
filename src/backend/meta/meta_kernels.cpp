// The meta device's kernels: they do nothing, because meta tensors have addresses but no data.
// With them every Tensor operation runs on meta and only the allocator sees its effect, which is
// how a training step is dry-run for its memory.
#include "core/device_kernels.h"

namespace headroom::meta {
namespace {

const DeviceKernels kMetaKernels = [] {
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

const bool kRegistered = (register_device_kernels(DeviceType::meta, &kMetaKernels), true);

}  // namespace
}  // namespace headroom::meta
