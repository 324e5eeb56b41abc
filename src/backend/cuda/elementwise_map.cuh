// The element-wise map behind the activation and arithmetic kernels: out_k = fn(in_0, ...) over
// contiguous tensors of one shape, vectorised 16 bytes at a time when every operand has one dtype
// and is aligned, one element at a time for mixed dtypes.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/operand.cuh"
#include "core/tensor.h"

namespace headroom::cuda {

// ---- element-wise maps: out_k = fn(in_0, ..., in_{kIn-1}) for every element

template <int kIn, int kOut>
struct MapArgs {
  Operand in[kIn];
  Operand out[kOut];  // an output with null data is not stored
};

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Every operand has dtype T; with V > 1 every address is 16-byte aligned and V = 16 / sizeof(T)
// elements move per load. Elements past the last whole vector are done one at a time.
template <typename T, int V, int kIn, int kOut, typename Fn>
__global__ void map_kernel(MapArgs<kIn, kOut> args, int64_t n, Fn fn) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t vectors = n / V;
  for (int64_t v = first; v < vectors; v += stride) {
    Pack<T, V> in[kIn], out[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) in[k] = reinterpret_cast<const Pack<T, V>*>(args.in[k].data)[v];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float x[kIn], y[kOut];
#pragma unroll
      for (int k = 0; k < kIn; ++k) x[k] = to_f32(in[k].v[e]);
      fn(x, y);
#pragma unroll
      for (int k = 0; k < kOut; ++k) out[k].v[e] = from_f32<T>(y[k]);
    }
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      if (args.out[k].data) reinterpret_cast<Pack<T, V>*>(args.out[k].data)[v] = out[k];
    }
  }
  for (int64_t i = vectors * V + first; i < n; i += stride) {
    float x[kIn], y[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = to_f32(reinterpret_cast<const T*>(args.in[k].data)[i]);
    fn(x, y);
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      if (args.out[k].data) reinterpret_cast<T*>(args.out[k].data)[i] = from_f32<T>(y[k]);
    }
  }
}

// Any mix of dtypes, one element at a time.
template <int kIn, int kOut, typename Fn>
__global__ void map_mixed_kernel(MapArgs<kIn, kOut> args, int64_t n, Fn fn) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float x[kIn], y[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = load(args.in[k], i);
    fn(x, y);
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      if (args.out[k].data) store(args.out[k], i, y[k]);
    }
  }
}

inline bool aligned16(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Runs fn over the elements of contiguous tensors of one shape; undefined outputs are skipped.
// An output may be one of the inputs (each element is read before it is written, by one thread).
template <int kIn, int kOut, typename Fn>
void map(const char* op, const std::array<Tensor, kIn>& in, const std::array<Tensor, kOut>& out,
         Fn fn) {
  const int64_t n = in[0].numel();
  if (n == 0) return;
  DeviceGuard guard(in[0].device().index);
  MapArgs<kIn, kOut> args;
  const DType dtype = in[0].dtype();
  bool uniform = true, aligned = true;
  for (int k = 0; k < kIn; ++k) {
    check_kernel_dtype(op, "input", in[k].dtype());
    args.in[k] = operand_of(in[k]);
    uniform = uniform && in[k].dtype() == dtype;
    aligned = aligned && aligned16(in[k]);
  }
  for (int k = 0; k < kOut; ++k) {
    if (!out[k].defined()) continue;
    check_kernel_dtype(op, "output", out[k].dtype());
    args.out[k] = operand_of(out[k]);
    uniform = uniform && out[k].dtype() == dtype;
    aligned = aligned && aligned16(out[k]);
  }
  cudaStream_t stream = current_stream();
  if (!uniform) {
    map_mixed_kernel<<<blocks_for(n), kThreads, 0, stream>>>(args, n, fn);
  } else {
    HEADROOM_CUDA_DISPATCH_FLOAT(dtype, T, {
      constexpr int V = 16 / sizeof(T);
      if (aligned) {
        map_kernel<T, V><<<blocks_for((n + V - 1) / V), kThreads, 0, stream>>>(args, n, fn);
      } else {
        map_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(args, n, fn);
      }
    });
  }
  check_launch();
}

}  // namespace headroom::cuda
