// A tensor as a kernel argument whose dtype is known only at run time: its address, dtype and
// element size, with fp32 loads and round-to-nearest-even stores through core/element_io.h (the
// CPU's own conversions, so a rounded result has the same bits as the CPU's to(dtype)). Kernels
// whose operands may mix dtypes use it instead of one template instance per combination.
#pragma once

#include <cstdint>

#include "core/element_io.h"
#include "core/tensor.h"

namespace headroom::cuda {

struct Operand {
  char* data = nullptr;  // null: the caller wants no such result
  DType dtype = DType::f32;
  int size = 4;  // bytes per element
};

inline Operand operand_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {static_cast<char*>(t.data_ptr()), t.dtype(), static_cast<int>(t.element_size())};
}

// Element i (in elements from the first) as fp32.
__device__ __forceinline__ float load(const Operand& o, int64_t i) {
  return load_as_f32(o.data + i * o.size, o.dtype);
}

__device__ __forceinline__ void store(const Operand& o, int64_t i, float v) {
  store_from_f32(o.data + i * o.size, o.dtype, v, Overflow::ieee);
}

}  // namespace headroom::cuda
