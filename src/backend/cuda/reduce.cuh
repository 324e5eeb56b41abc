// Fixed-order block reductions, shared by reduction.cu and softmax.cu, and the per-block partial
// norms behind norm_partial, shared by grad_checks.cu (clip_grad_norm_, LOMO) and adafactor.cu
// (Adafactor's RMS values). Partial results go to a fixed grid of kNormPartialBlocks slots and
// are combined in slot order, so a result repeats bit for bit run to run without float atomics.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/backend_parts.h"

namespace headroom::cuda {

// Grid size limit of the row-per-block reductions (grid-stride loops cover the rest).
inline constexpr int64_t kMaxBlocks = int64_t{1} << 20;

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// `op` over the block in a fixed order: a butterfly within each warp (lane 0's order is the one
// kept), then the warps' results in warp order. Every thread gets the result. blockDim.x is a
// multiple of 32, every thread of the block calls it, and scratch holds 32 values.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* scratch) {
#pragma unroll
  for (int lanes = 16; lanes > 0; lanes >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, lanes));
  __syncthreads();  // the previous call's readers are done with scratch
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) total = op(total, scratch[w]);
  return total;
}

// The sum of v over the warp, in a fixed tree; every lane gets it.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), in a fixed order; the
// result is valid in thread 0. Every thread of the block must call it.
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T warp_sums[32];
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  T total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_sums[w];
  }
  __syncthreads();  // warp_sums may be reused by a following call
  return total;
}

// NaN-propagating max, as backend/cpu/grad_checks.cpp's max_or_nan.
__device__ __forceinline__ double max_or_nan(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  return a > b ? a : b;
}

enum class NormKind { two, one, power, inf };

// |x|^p of one element in double, as backend/cpu/grad_checks.cpp computes each term.
template <NormKind kKind>
__device__ __forceinline__ double norm_term(float x, double p) {
  const double v = static_cast<double>(x);
  if constexpr (kKind == NormKind::two) return v * v;
  if constexpr (kKind == NormKind::one) return fabs(v);
  if constexpr (kKind == NormKind::power) return pow(fabs(v), p);
  return fabs(v);
}

// The fold of every thread's acc over the block (kThreads threads), valid in thread 0: the max
// with NaN winning for the inf-norm, else the sum, in a fixed order.
template <NormKind kKind>
__device__ __forceinline__ double block_fold(double acc) {
  if constexpr (kKind == NormKind::inf) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      acc = max_or_nan(acc, __shfl_xor_sync(0xffffffffu, acc, offset));
    }
    __shared__ double warp_max[kThreads / 32];
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < kThreads / 32; ++w) acc = max_or_nan(acc, warp_max[w]);
    }
    return acc;
  } else {
    return block_sum(acc);
  }
}

// Block b of a grid of `grid` blocks folds elements b*blockDim + t, stepping by the grid, and
// writes its partial to row[b]; block 0 also zeroes row[grid .. kNormPartialBlocks).
template <typename T, NormKind kKind>
__global__ void __launch_bounds__(kThreads)
    norm_partial_kernel(const T* x, int64_t n, double p, double* row) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double term = norm_term<kKind>(to_f32(x[i]), p);
    acc = kKind == NormKind::inf ? max_or_nan(acc, term) : acc + term;
  }
  acc = block_fold<kKind>(acc);
  if (threadIdx.x == 0) row[blockIdx.x] = acc;
  if (blockIdx.x == 0) {
    for (int64_t s = gridDim.x + threadIdx.x; s < kNormPartialBlocks; s += blockDim.x) {
      row[s] = 0.0;
    }
  }
}

// Blocks for norm_partial_kernel: about 4 elements per thread or more, at most the fixed grid.
__host__ __device__ inline int norm_partial_grid(int64_t n) {
  const int64_t per_block = int64_t{kThreads} * 4;
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1                    ? 1
                          : blocks > kNormPartialBlocks ? kNormPartialBlocks
                                                        : blocks);
}

template <typename T, NormKind kKind>
void launch_norm_partial(const T* x, int64_t n, double p, double* row, cudaStream_t stream) {
  norm_partial_kernel<T, kKind><<<norm_partial_grid(n), kThreads, 0, stream>>>(x, n, p, row);
}

// The sum of x^2 into row[0 .. kNormPartialBlocks).
template <typename T>
void launch_sum_of_squares(const T* x, int64_t n, double* row, cudaStream_t stream) {
  launch_norm_partial<T, NormKind::two>(x, n, 2.0, row, stream);
}

}  // namespace headroom::cuda
