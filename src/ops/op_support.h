// What every op needs around its kernels: which device computes, and the fp32 compute copies.
// CPU kernels compute in fp32; inputs in bf16 / f16 are widened first and results rounded back to
// the input dtype, as GPU kernels load low-precision values and accumulate in fp32.
//
// Every buffer whose size depends on the data (outputs, saved statistics, workspaces) comes from
// Tensor::empty in the op, never from malloc in a kernel, so the meta device sees the same
// allocations as a real device and a dry run predicts memory exactly.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace headroom {

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
