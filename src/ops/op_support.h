// What every op needs around its kernels: argument checks and dtype conversions. Every op has one
// code path on every device (Note [Kernel tables] in backend/kernel_table.h): infer shapes and
// dtypes, allocate, call its family's table on the tensors' device, in their own dtypes.
//
// Every buffer whose size depends on the data (outputs, saved statistics, workspaces) comes from
// Tensor::empty in the op, never from malloc in a kernel, so the meta device sees the same
// allocations as a real device and a dry run predicts memory exactly, for whichever device it
// stands in for.
#pragma once

#include <vector>

#include "backend/kernel_table.h"
#include "core/error.h"
#include "core/tensor.h"

namespace headroom {

// The tensor itself when it is contiguous in `dtype`, else a contiguous copy converted to it.
Tensor contiguous_as(const Tensor& tensor, DType dtype);

// Throws ValueError unless `tensor` is defined and floating (op and argument named).
void check_floating(const char* op, const char* argument, const Tensor& tensor);
// Throws ValueError unless all defined tensors are on one device (op named).
void check_same_device(const char* op, const std::vector<Tensor>& tensors);

}  // namespace headroom
