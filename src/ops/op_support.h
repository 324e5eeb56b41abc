// What every op needs around its kernels: which device computes, and the fp32 compute copies.
// CPU kernels compute in fp32; inputs in bf16 / f16 are widened first and results rounded back to
// the input dtype, as GPU kernels load low-precision values and accumulate in fp32.
//
// Every buffer whose size depends on the data (outputs, saved statistics, workspaces) comes from
// Tensor::empty in the op, never from malloc in a kernel, so the meta device sees the same
// allocations as a real device and a dry run predicts memory exactly.
#pragma once

#include <vector>

#include "backend/kernel_table.h"
#include "core/error.h"
#include "core/tensor.h"

namespace headroom {

// Note [Native allocation pattern]
// An op allocates in one of two patterns. The CPU's kernels take fp32, so the op widens bf16 /
// f16 inputs into fp32 copies, computes fp32 results and rounds them to the input dtype. A native
// device (backend/kernel_table.h: CUDA) reads and writes the tensors' own dtypes, so the op
// allocates only the outputs, statistics and workspaces. The meta device has no kernels and
// follows whichever pattern the device it stands in for would: the CPU's by default, a native
// device's while a MetaAllocatesLike guard says so (the planner sets it when its target is a
// GPU), so a dry run allocates exactly what the real run will.

// Where an op's kernels run and which allocation pattern it follows.
struct OpRoute {
  bool cpu = false;                   // run the CPU kernels on widened fp32 copies
  bool kernels = false;               // run the device's kernel tables
  bool native = false;                // allocate in the native pattern (device set, or meta)
  const char* op = "";
  Device where;

  // The device's entry, or NotImplementedError naming the op, the entry and the device when the
  // backend lacks it.
  template <typename Family, typename Signature>
  const Kernel<Signature>& need(Kernel<Signature> Family::*entry) const {
    return need_kernel(op, where, entry);
  }
};

// The route of `op` on `device`: the CPU; a native device's table; or the meta device (no
// kernels) in the pattern of the device it stands in for. NotImplementedError for a device with
// neither CPU kernels nor a table.
OpRoute op_route(const char* op, Device device);

// While alive, the meta device allocates as a device of type `like` would (Note [Native
// allocation pattern]); guards nest.
class MetaAllocatesLike {
 public:
  explicit MetaAllocatesLike(DeviceType like);
  ~MetaAllocatesLike();
  MetaAllocatesLike(const MetaAllocatesLike&) = delete;
  MetaAllocatesLike& operator=(const MetaAllocatesLike&) = delete;

 private:
  DeviceType previous_;
};

// The device type the meta device currently allocates like (cpu unless a guard is alive).
DeviceType meta_allocates_like();

// True when the op's kernels should run on the CPU; false on the meta device (shapes and
// allocations only); NotImplementedError naming the op for a device without its kernels.
bool computes_on_cpu(const char* op, Device device);

// The tensor itself when it is contiguous fp32, else a contiguous fp32 copy.
Tensor f32_contiguous(const Tensor& tensor);

// The tensor itself when it is contiguous in `dtype`, else a contiguous copy converted to it.
Tensor contiguous_as(const Tensor& tensor, DType dtype);

// True when every defined tensor is bf16: the op then runs its GEMMs on the CPU's bf16
// instructions (cpu::gemm_bf16) instead of widening to fp32.
bool all_bf16(const std::vector<Tensor>& tensors);

// `result` (fp32) rounded to `dtype`, or itself when dtype is f32.
Tensor to_dtype(const Tensor& result, DType dtype);

// Throws ValueError unless `tensor` is defined and floating (op and argument named).
void check_floating(const char* op, const char* argument, const Tensor& tensor);
// Throws ValueError unless all defined tensors are on one device (op named).
void check_same_device(const char* op, const std::vector<Tensor>& tensors);

}  // namespace headroom
