// Dropout on CUDA on the Philox stream, keeping the elements the CPU kernel keeps
// (backend/cpu/dropout.cpp): the same words decide, so masks agree bit for bit.
#include <cstdint>

#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/operand.cuh"
#include "core/philox.h"

namespace headroom::cuda {
namespace {

// ---- dropout: Note [Dropout mask] in ops/dropout.cpp

// One thread per Philox block: elements 4b .. 4b + 3 read its four words (Note [Philox stream
// layout]), as the CPU's dropout_range does.
__global__ void dropout_kernel(Operand x, Operand out, int64_t n, uint64_t seed, uint64_t offset,
                               uint32_t threshold, float scale) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    const Philox4x32Block words = philox_block(seed, offset + static_cast<uint64_t>(b));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * b + k;
      if (i < n) store(out, i, load(x, i) * ((words.word[k] >> 8) >= threshold ? scale : 0.0f));
    }
  }
}

void dropout(const Tensor& x, uint64_t seed, uint64_t offset, uint32_t threshold, float scale,
             const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  check_kernel_dtype("dropout", "x", x.dtype());
  check_kernel_dtype("dropout", "out", out.dtype());
  DeviceGuard guard(x.device().index);
  dropout_kernel<<<blocks_for((n + 3) / 4), kThreads, 0, current_stream()>>>(
      operand_of(x), operand_of(out), n, seed, offset, threshold, scale);
  check_launch();
}

// out = residual + the dropped x rounded to x's dtype (stored into a register in x's dtype and
// read back), as the CPU's dropout_apply_add: the values of dropout then add.
__global__ void dropout_add_kernel(Operand x, Operand residual, Operand out, int64_t n,
                                   uint64_t seed, uint64_t offset, uint32_t threshold,
                                   float scale) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    const Philox4x32Block words = philox_block(seed, offset + static_cast<uint64_t>(b));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * b + k;
      if (i >= n) break;
      uint32_t rounded = 0;
      store_from_f32(&rounded, x.dtype,
                     load(x, i) * ((words.word[k] >> 8) >= threshold ? scale : 0.0f),
                     Overflow::ieee);
      store(out, i, load(residual, i) + load_as_f32(&rounded, x.dtype));
    }
  }
}

void dropout_add(const Tensor& x, const Tensor& residual, uint64_t seed, uint64_t offset,
                 uint32_t threshold, float scale, const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  check_kernel_dtype("dropout_add", "x", x.dtype());
  check_kernel_dtype("dropout_add", "residual", residual.dtype());
  check_kernel_dtype("dropout_add", "out", out.dtype());
  DeviceGuard guard(x.device().index);
  dropout_add_kernel<<<blocks_for((n + 3) / 4), kThreads, 0, current_stream()>>>(
      operand_of(x), operand_of(residual), operand_of(out), n, seed, offset, threshold, scale);
  check_launch();
}

}  // namespace

void fill_dropout_kernels(DropoutKernels& kernels) {
  kernels.apply = dropout;
  kernels.apply_add = dropout_add;
}

}  // namespace headroom::cuda
