// Reductions on CUDA: the sum of everything (sum_all), the sum over the middle dimension of
// [outer, n, inner] (sum_middle) and the fill that is a full reduction's backward (fill_scaled).
// Every sum runs in an order fixed by the launch shape, which depends on the sizes alone and
// never on the GPU, so results repeat bit for bit; no atomics. Sums of elements accumulate in
// fp64 as the CPU's do (backend/cpu/reduction.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/operand.cuh"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/backend_parts.h"
#include "core/error.h"

namespace headroom::cuda {
namespace {

// ---- sum_all: Note on the partial buffer in backend/reduction_kernels.h (sum_all_partials)

constexpr int kSumThreads = 512;

// Block b sums elements b * blockDim + t + k * gridDim * blockDim in fp64, then reduces over the
// block into partial[b], or, with no partial buffer (one block), into out.
template <typename T>
__global__ void sum_blocks_kernel(const T* x, int64_t n, double* partial, Operand out,
                                  double factor) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    s += to_f32(x[i]);
  }
  s = block_reduce(s, Sum{}, scratch);
  if (threadIdx.x == 0) {
    if (partial) {
      partial[blockIdx.x] = s;
    } else {
      store(out, 0, static_cast<float>(s * factor));
    }
  }
}

__global__ void sum_partials_kernel(const double* partial, int64_t count, Operand out,
                                    double factor) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_reduce(s, Sum{}, scratch);
  if (threadIdx.x == 0) store(out, 0, static_cast<float>(s * factor));
}

void sum_all(const Tensor& x, double factor, const Tensor& partial, const Tensor& out) {
  const int64_t n = x.numel();
  const int64_t blocks = sum_all_partials(n);
  if (blocks > 0 &&
      (!partial.defined() || partial.numel() < blocks || partial.element_size() != 8)) {
    throw ValueError(
        str_cat("sum_all: ", n, " elements need a workspace of ", blocks, " 8-byte partial sums"));
  }
  check_kernel_dtype("sum_all", "out", out.dtype());
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  double* p = blocks > 0 ? static_cast<double*>(partial.data_ptr()) : nullptr;
  HEADROOM_CUDA_DISPATCH_FLOAT(
      x.dtype(), T,
      sum_blocks_kernel<T>
      <<<static_cast<int>(std::max<int64_t>(blocks, 1)), kSumThreads, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), n, p, operand_of(out), factor));
  check_launch();
  if (blocks > 0) {
    sum_partials_kernel<<<1, kSumThreads, 0, stream>>>(p, blocks, operand_of(out), factor);
    check_launch();
  }
}

// ---- sum_middle

// inner == 1: one block per row of n.
template <typename T>
__global__ void sum_rows_kernel(const T* x, int64_t outer, int64_t n, double factor, Operand out) {
  __shared__ double scratch[32];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* row = x + o * n;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += to_f32(row[j]);
    s = block_reduce(s, Sum{}, scratch);
    if (threadIdx.x == 0) store(out, o, static_cast<float>(s * factor));
  }
}

constexpr int kColumns = 32;     // adjacent outputs of a block: one warp's coalesced loads
constexpr int kColumnRows = 16;  // threads down each column, summed in order at the end

// inner > 1: a block takes 32 adjacent outputs of one outer slice; thread (column c, group r)
// sums rows r, r + 16, ... of column c, then group 0 adds the 16 sums in group order.
template <typename T>
__global__ void sum_columns_kernel(const T* x, int64_t outer, int64_t n, int64_t inner,
                                   double factor, Operand out) {
  __shared__ double partial[kColumnRows][kColumns];
  const int c = threadIdx.x % kColumns, r = threadIdx.x / kColumns;
  const int64_t tiles_per_slice = (inner + kColumns - 1) / kColumns;
  for (int64_t tile = blockIdx.x; tile < outer * tiles_per_slice; tile += gridDim.x) {
    const int64_t o = tile / tiles_per_slice;
    const int64_t i = (tile % tiles_per_slice) * kColumns + c;
    double s = 0.0;
    if (i < inner) {
      for (int64_t j = r; j < n; j += kColumnRows) s += to_f32(x[(o * n + j) * inner + i]);
    }
    partial[r][c] = s;
    __syncthreads();
    if (r == 0 && i < inner) {
      double total = partial[0][c];
      for (int g = 1; g < kColumnRows; ++g) total += partial[g][c];
      store(out, o * inner + i, static_cast<float>(total * factor));
    }
    __syncthreads();  // before the next tile overwrites partial
  }
}

}  // namespace

void sum_middle(const Tensor& x, int64_t outer, int64_t n, int64_t inner, double factor,
                const Tensor& out) {
  if (outer * inner == 0) return;
  check_kernel_dtype("sum_middle", "out", out.dtype());
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  if (inner == 1) {
    HEADROOM_CUDA_DISPATCH_FLOAT(
        x.dtype(), T,
        sum_rows_kernel<T><<<static_cast<int>(std::min(outer, kMaxBlocks)), kThreads, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), outer, n, factor, operand_of(out)));
  } else {
    const int64_t tiles = outer * ((inner + kColumns - 1) / kColumns);
    HEADROOM_CUDA_DISPATCH_FLOAT(
        x.dtype(), T,
        sum_columns_kernel<T>
        <<<static_cast<int>(std::min(tiles, kMaxBlocks)), kColumns * kColumnRows, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), outer, n, inner, factor, operand_of(out)));
  }
  check_launch();
}

namespace {

// ---- fill_scaled: dst = factor * scalar, rounded as the CPU's fill_(g.item() * factor)

template <typename T>
__global__ void fill_scaled_kernel(T* dst, int64_t n, Operand scalar, double factor) {
  const T value = from_f32<T>(static_cast<float>(static_cast<double>(load(scalar, 0)) * factor));
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = value;
  }
}

void fill_scaled(const Tensor& dst, const Tensor& scalar, double factor) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  check_kernel_dtype("fill_scaled", "scalar", scalar.dtype());
  DeviceGuard guard(dst.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(dst.dtype(), T,
                               fill_scaled_kernel<T>
                               <<<blocks_for(n), kThreads, 0, current_stream()>>>(
                                   static_cast<T*>(dst.data_ptr()), n, operand_of(scalar), factor));
  check_launch();
}

}  // namespace

void fill_reduction_kernels(ReductionKernels& kernels) {
  kernels.sum_all = sum_all;
  kernels.sum_middle = sum_middle;
  kernels.fill_scaled = fill_scaled;
}

}  // namespace headroom::cuda
