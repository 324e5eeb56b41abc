// Tensor lists in a launch's parameters (Note [Tensor lists] in backend/kernel_table.h): the
// pointers, sizes and dtypes of up to kTensorListCapacity tensors, and which tensor each block of
// a one-dimensional grid works on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_launch.h"
#include "backend/kernel_table.h"

namespace headroom::cuda {

// Elements one block of a list kernel covers (its threads step through them).
inline constexpr int64_t kListBlockElements = int64_t{kThreads} * 16;
// CUDA 12.1's limit on a launch's parameters, Volta and later.
inline constexpr size_t kMaxKernelParameterBytes = 32764;

// What one block of a list kernel works on.
struct ListRange {
  int32_t index;
  int64_t begin, end;
};

// Which tensor of a list block b works on: blocks [first_block[i], first_block[i + 1]) cover
// tensor i in chunks of kListBlockElements.
struct ListBlocks {
  int32_t first_block[kTensorListCapacity + 1];
  int32_t count = 0;

  // Sets the blocks for sizes n[0 .. count) and returns the grid's size (0 for no elements).
  template <typename SizeOf>
  int32_t plan(int32_t tensors, SizeOf size_of) {
    count = tensors;
    int64_t blocks = 0;
    for (int32_t i = 0; i < tensors; ++i) {
      first_block[i] = static_cast<int32_t>(blocks);
      blocks += (size_of(i) + kListBlockElements - 1) / kListBlockElements;
    }
    first_block[tensors] = static_cast<int32_t>(blocks);
    return static_cast<int32_t>(blocks);
  }

  // The tensor block `block` covers: the last i with first_block[i] <= block (empty tensors are
  // skipped that way), found by bisection.
  __device__ __forceinline__ int32_t tensor_of(int32_t block) const {
    int32_t low = 0, high = count - 1;
    while (low < high) {
      const int32_t mid = (low + high + 1) / 2;
      if (first_block[mid] <= block) {
        low = mid;
      } else {
        high = mid - 1;
      }
    }
    return low;
  }
  // The tensor that block `block` covers and the elements [begin, end) of it that it does; the
  // tensors' sizes are their `n`.
  template <typename ListEntry>
  __device__ __forceinline__ ListRange range_of(const ListEntry* tensors, int32_t block) const {
    const int32_t index = tensor_of(block);
    const int64_t begin = static_cast<int64_t>(block - first_block[index]) * kListBlockElements;
    const int64_t n = tensors[index].n;
    return ListRange{index, begin, n < begin + kListBlockElements ? n : begin + kListBlockElements};
  }
};

// One tensor of a list of floating tensors whose dtypes may differ.
struct ListTensor {
  void* data;
  int64_t n;
  DType dtype;
};

__device__ __forceinline__ float list_load(const ListTensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::bf16:
      return to_f32(static_cast<const __nv_bfloat16*>(t.data)[i]);
    case DType::f16:
      return to_f32(static_cast<const __half*>(t.data)[i]);
    default:
      return static_cast<const float*>(t.data)[i];
  }
}

__device__ __forceinline__ void list_store(const ListTensor& t, int64_t i, float v) {
  switch (t.dtype) {
    case DType::bf16:
      static_cast<__nv_bfloat16*>(t.data)[i] = from_f32<__nv_bfloat16>(v);
      break;
    case DType::f16:
      static_cast<__half*>(t.data)[i] = from_f32<__half>(v);
      break;
    default:
      static_cast<float*>(t.data)[i] = v;
  }
}

// A list of floating tensors (f32 / bf16 / f16, checked) and its blocks.
struct FloatList {
  ListTensor tensors[kTensorListCapacity];
  ListBlocks blocks;
};
static_assert(sizeof(FloatList) + 64 <= kMaxKernelParameterBytes);

// The list's tensors and the grid that covers them (0 blocks: nothing to launch).
inline int32_t fill_float_list(const char* op, TensorList list, FloatList& out) {
  HEADROOM_CHECK(list.size() <= kTensorListCapacity, "cuda ", op, ": ", list.size(),
                 " tensors in one list; at most ", kTensorListCapacity);
  for (size_t i = 0; i < list.size(); ++i) {
    check_kernel_dtype(op, "tensor", list[i].dtype());
    out.tensors[i] = ListTensor{list[i].data_ptr(), list[i].numel(), list[i].dtype()};
  }
  return out.blocks.plan(static_cast<int32_t>(list.size()),
                         [&](int32_t i) { return out.tensors[i].n; });
}

}  // namespace headroom::cuda
