// What every CUDA kernel file shares: the stream kernels are queued on, grid sizing, launch
// checks, and the mapping from a tensor's DType to the element type a kernel template takes
// (float, __nv_bfloat16, __half), with fp32 loads and round-to-nearest-even stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "core/dtype_dispatch.h"
#include "core/tensor.h"

namespace headroom::cuda {

// The stream this thread queues kernels on: the legacy default stream unless a StreamGuard
// (backend/cuda/cuda_stream.h) set another.
cudaStream_t current_stream();

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements.
inline int blocks_for(int64_t n, int threads = kThreads) {
  return static_cast<int>(std::clamp<int64_t>((n + threads - 1) / threads, 1, int64_t{1} << 20));
}

inline void check_launch() { HEADROOM_CUDA_CHECK(cudaGetLastError()); }

// A device tensor's elements as T*, the dtype checked. Tensor::data<T>() is the host accessor and
// refuses any tensor not on the CPU.
template <typename T>
T* device_data(const Tensor& t) {
  constexpr DType requested = dtype_of<std::remove_cv_t<T>>::value;
  if (t.dtype() != requested) {
    throw Error(str_cat("device_data: the tensor holds ", dtype_name(t.dtype()), ", not ",
                        dtype_name(requested)));
  }
  return static_cast<T*>(t.data_ptr());
}

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// Throws ValueError naming `op` for a dtype that is not f32, bf16 or f16.
void check_kernel_dtype(const char* op, const char* argument, DType dtype);

}  // namespace headroom::cuda

// Runs the statement with `T` bound to the element type of a floating `dtype`:
//   HEADROOM_CUDA_DISPATCH_FLOAT(x.dtype(), T, kernel<T><<<...>>>(...));
#define HEADROOM_CUDA_DISPATCH_FLOAT(dtype, T, ...)                      \
  do {                                                                   \
    switch (dtype) {                                                     \
      case ::headroom::DType::f32: {                                     \
        using T = float;                                                 \
        __VA_ARGS__;                                                     \
        break;                                                           \
      }                                                                  \
      case ::headroom::DType::bf16: {                                    \
        using T = __nv_bfloat16;                                         \
        __VA_ARGS__;                                                     \
        break;                                                           \
      }                                                                  \
      case ::headroom::DType::f16: {                                     \
        using T = __half;                                                \
        __VA_ARGS__;                                                     \
        break;                                                           \
      }                                                                  \
      default:                                                           \
        ::headroom::cuda::check_kernel_dtype(__func__, "tensor", dtype); \
    }                                                                    \
  } while (0)
