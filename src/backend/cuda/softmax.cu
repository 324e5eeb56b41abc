// Softmax forward and backward on CUDA over the middle dimension of [outer, n, inner], in fp32 as
// the CPU's (backend/cpu/softmax.cpp), with CUDA's expf for the CPU's polynomial exp (both within
// about two ulps of exact), in an order fixed by the launch shape (no atomics).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/operand.cuh"
#include "backend/cuda/reduce.cuh"

namespace headroom::cuda {
namespace {

// ---- softmax over the middle dimension of [outer, n, inner]

// Threads per row (inner == 1): a multiple of 32 near n, at most 512.
int softmax_threads(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>((n + 31) / 32 * 32, 32, 512));
}

// inner == 1: one block per row: its max, the sum of exp(x - max), then exp(x - max) / sum as
// the CPU's softmax_row computes it (times the reciprocal).
__global__ void softmax_rows_kernel(Operand x, Operand y, int64_t rows, int64_t n) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, load(x, base + j));
    m = block_reduce(m, Max{}, scratch);
    float total = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) total += expf(load(x, base + j) - m);
    total = block_reduce(total, Sum{}, scratch);
    const float inv = 1.0f / total;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      store(y, base + j, expf(load(x, base + j) - m) * inv);
    }
  }
}

// inner > 1: one thread per (outer, inner) column, down its n elements in order.
__global__ void softmax_columns_kernel(Operand x, Operand y, int64_t outer, int64_t n,
                                       int64_t inner) {
  for (int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; col < outer * inner;
       col += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = fmaxf(m, load(x, base + j * inner));
    float total = 0.0f;
    for (int64_t j = 0; j < n; ++j) total += expf(load(x, base + j * inner) - m);
    const float inv = 1.0f / total;
    for (int64_t j = 0; j < n; ++j) {
      store(y, base + j * inner, expf(load(x, base + j * inner) - m) * inv);
    }
  }
}

// dx = y * (dy - sum(dy * y)), per row.
__global__ void softmax_backward_rows_kernel(Operand y, Operand dy, Operand dx, int64_t rows,
                                             int64_t n) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      dot += load(dy, base + j) * load(y, base + j);
    }
    dot = block_reduce(dot, Sum{}, scratch);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      store(dx, base + j, load(y, base + j) * (load(dy, base + j) - dot));
    }
  }
}

__global__ void softmax_backward_columns_kernel(Operand y, Operand dy, Operand dx, int64_t outer,
                                                int64_t n, int64_t inner) {
  for (int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; col < outer * inner;
       col += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    float dot = 0.0f;
    for (int64_t j = 0; j < n; ++j) dot += load(dy, base + j * inner) * load(y, base + j * inner);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      store(dx, k, load(y, k) * (load(dy, k) - dot));
    }
  }
}

void softmax_forward(const Tensor& x, int64_t outer, int64_t n, int64_t inner, const Tensor& out) {
  if (outer * n * inner == 0) return;
  check_kernel_dtype("softmax", "x", x.dtype());
  check_kernel_dtype("softmax", "out", out.dtype());
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  if (inner == 1) {
    softmax_rows_kernel<<<static_cast<int>(std::min(outer, kMaxBlocks)), softmax_threads(n), 0,
                          stream>>>(operand_of(x), operand_of(out), outer, n);
  } else {
    softmax_columns_kernel<<<blocks_for(outer * inner), kThreads, 0, stream>>>(
        operand_of(x), operand_of(out), outer, n, inner);
  }
  check_launch();
}

void softmax_backward(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n,
                      int64_t inner, const Tensor& grad_x) {
  if (outer * n * inner == 0) return;
  check_kernel_dtype("softmax backward", "y", y.dtype());
  check_kernel_dtype("softmax backward", "grad_y", grad_y.dtype());
  check_kernel_dtype("softmax backward", "grad_x", grad_x.dtype());
  DeviceGuard guard(y.device().index);
  cudaStream_t stream = current_stream();
  if (inner == 1) {
    softmax_backward_rows_kernel<<<static_cast<int>(std::min(outer, kMaxBlocks)),
                                   softmax_threads(n), 0, stream>>>(
        operand_of(y), operand_of(grad_y), operand_of(grad_x), outer, n);
  } else {
    softmax_backward_columns_kernel<<<blocks_for(outer * inner), kThreads, 0, stream>>>(
        operand_of(y), operand_of(grad_y), operand_of(grad_x), outer, n, inner);
  }
  check_launch();
}

}  // namespace

void fill_softmax_kernels(SoftmaxKernels& kernels) {
  kernels.forward = softmax_forward;
  kernels.backward = softmax_backward;
}

}  // namespace headroom::cuda
