// Adafactor on the GPU (Note [Adafactor step]), the adafactor table's entry
// (backend/adafactor_kernels.h; the CPU's is backend/cpu/adafactor.cpp): the parameter's RMS, lr_t
// and the clip divisor stay in the scalars workspace on the device. Each kernel does the CPU
// kernel's float operations in its order, with the _rn intrinsics so that nvcc fuses nothing the
// CPU does not (and fmaf where it does), so results match the CPU reference to the bit except where
// a reduction order differs (the row sums); one launch per parameter, no host reads.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/backend_parts.h"

namespace headroom::cuda {
namespace {

using AdafactorCoefficients = AdafactorKernels::Coefficients;
constexpr int64_t kPartials = kNormPartialBlocks;
constexpr int64_t kRms = kAdafactorRms;  // then lr_t, the clip divisor, row means

// u = g*g + eps1, unfused as on the CPU.
__device__ __forceinline__ float squared_plus(float g, float eps1) {
  return __fadd_rn(__fmul_rn(g, g), eps1);
}

// row[r] = beta2t row[r] + (1 - beta2t) mean_j u: one warp per row of [rows_total, cols], the
// lanes' sums added in a fixed tree (the CPU adds in order: a few ulps apart).
template <typename G>
__global__ void adafactor_rows_kernel(const G* grad, float* row, int64_t rows_total, int64_t cols,
                                      AdafactorCoefficients c) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows_total;
       r += warps) {
    const G* g = grad + r * cols;
    float sum = 0.0f;
    for (int64_t j = lane; j < cols; j += 32) {
      sum = __fadd_rn(sum, squared_plus(to_f32(g[j]), c.eps1));
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      const float mean = __fdiv_rn(sum, static_cast<float>(cols));
      row[r] = __fmaf_rn(mean, c.one_minus_beta2t, __fmul_rn(row[r], c.beta2t));
    }
  }
}

// col[b, j] likewise over the rows, in the CPU's order; col_factor = 1 / sqrt(col).
template <typename G>
__global__ void adafactor_cols_kernel(const G* grad, float* col, float* col_factor, int64_t batch,
                                      int64_t rows, int64_t cols, AdafactorCoefficients c) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < batch * cols;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / cols, j = k % cols;
    const G* g = grad + b * rows * cols + j;
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      sum = __fadd_rn(sum, squared_plus(to_f32(g[r * cols]), c.eps1));
    }
    const float mean = __fdiv_rn(sum, static_cast<float>(rows));
    const float updated = __fmaf_rn(mean, c.one_minus_beta2t, __fmul_rn(col[k], c.beta2t));
    col[k] = updated;
    col_factor[k] = __fdiv_rn(1.0f, __fsqrt_rn(updated));
  }
}

// The mean of each matrix's row statistics, into scalars[kRms + 3 + b]: one block per matrix.
__global__ void adafactor_row_mean_kernel(const float* row, int64_t rows, double* scalars) {
  const int64_t b = blockIdx.x;
  float sum = 0.0f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum = __fadd_rn(sum, row[b * rows + r]);
  sum = block_sum(sum);
  if (threadIdx.x == 0) scalars[kRms + 3 + b] = __fdiv_rn(sum, static_cast<float>(rows));
}

// The unclipped update of element (r, j) of a factored parameter, whose row statistic is
// row_stat and whose matrix has row mean row_mean.
__device__ __forceinline__ float factored_update(float row_stat, float row_mean, float col_factor,
                                                 float g) {
  const float row_factor = __fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(row_stat, row_mean)));
  return __fmul_rn(__fmul_rn(row_factor, col_factor), g);
}

// Sum of u^2 over the factored update, in double, into kPartials per-block partials (a fixed
// grid; rows are spread over blocks, columns over threads).
template <typename G>
__global__ void __launch_bounds__(kThreads)
    adafactor_factored_sumsq_kernel(const G* grad, const float* row, const float* col_factor,
                                    int64_t batch, int64_t rows, int64_t cols, double* scalars) {
  double acc = 0.0;
  for (int64_t r = blockIdx.x; r < batch * rows; r += gridDim.x) {
    const int64_t b = r / rows;
    const float row_mean = static_cast<float>(scalars[kRms + 3 + b]);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float u =
          factored_update(row[r], row_mean, col_factor[b * cols + j], to_f32(grad[r * cols + j]));
      acc += static_cast<double>(u) * u;
    }
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) scalars[kPartials + blockIdx.x] = acc;
}

// Vectors: v = beta2t v + (1 - beta2t) u, then the sum of ((1 / sqrt(v)) g)^2 into partials.
template <typename G>
__global__ void __launch_bounds__(kThreads)
    adafactor_vector_kernel(const G* grad, float* exp_avg_sq, int64_t n, AdafactorCoefficients c,
                            double* scalars) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(grad[i]);
    const float v =
        __fmaf_rn(squared_plus(g, c.eps1), c.one_minus_beta2t, __fmul_rn(exp_avg_sq[i], c.beta2t));
    exp_avg_sq[i] = v;
    const float u = __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(v)), g);
    acc += static_cast<double>(u) * u;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) scalars[kPartials + blockIdx.x] = acc;
}

// rms_of in backend/cpu/adafactor.cpp.
__device__ __forceinline__ float rms_of(double sum_of_squares, int64_t n) {
  return __fdiv_rn(static_cast<float>(sqrt(sum_of_squares)),
                   static_cast<float>(sqrt(static_cast<double>(n))));
}

// One thread: the parameter's RMS, lr_t (as backend/cpu/adafactor.cpp computes them) and the
// clip divisor max(1, RMS(u) / clip_threshold), from the partials in order.
__global__ void adafactor_finish_kernel(double* scalars, int64_t n, AdafactorCoefficients c) {
  double param_sum = 0.0, update_sum = 0.0;
  for (int64_t k = 0; k < kPartials; ++k) param_sum += scalars[k];
  for (int64_t k = 0; k < kPartials; ++k) update_sum += scalars[kPartials + k];
  const float rms = rms_of(param_sum, n);
  double lr = c.rho;
  if (c.scale_parameter) {
    lr = rms > c.eps2 ? static_cast<double>(__fmul_rn(rms, static_cast<float>(c.rho)))
                      : c.eps2 * c.rho;
  }
  const float ratio = __fdiv_rn(rms_of(update_sum, n), c.clip_threshold);
  scalars[kRms] = rms;
  scalars[kRms + 1] = lr;
  scalars[kRms + 2] = 1.0f < ratio ? ratio : 1.0f;  // std::max(1.0f, ratio)
}

// apply_update in backend/cpu/adafactor.cpp, given u before clipping.
template <typename P>
__device__ __forceinline__ void adafactor_apply(P* param, float* exp_avg, int64_t i, float u,
                                                const double* scalars,
                                                const AdafactorCoefficients& c) {
  const double lr = scalars[kRms + 1];
  const float divisor = static_cast<float>(scalars[kRms + 2]);
  u = __fmul_rn(__fdiv_rn(u, divisor), static_cast<float>(lr));
  if (c.first_moment) {
    u = __fmaf_rn(u, c.one_minus_beta1, __fmul_rn(exp_avg[i], c.beta1));
    exp_avg[i] = u;
  }
  float p = to_f32(param[i]);
  if (c.weight_decay != 0.0) p = __fmaf_rn(p, static_cast<float>(-c.weight_decay * lr), p);
  param[i] = from_f32<P>(__fsub_rn(p, u));
}

template <typename P, typename G>
__global__ void adafactor_factored_apply_kernel(P* param, const G* grad, float* exp_avg,
                                                const float* row, const float* col_factor,
                                                int64_t batch, int64_t rows, int64_t cols,
                                                const double* scalars, AdafactorCoefficients c) {
  for (int64_t r = blockIdx.x; r < batch * rows; r += gridDim.x) {
    const int64_t b = r / rows;
    const float row_mean = static_cast<float>(scalars[kRms + 3 + b]);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const int64_t i = r * cols + j;
      const float u = factored_update(row[r], row_mean, col_factor[b * cols + j], to_f32(grad[i]));
      adafactor_apply(param, exp_avg, i, u, scalars, c);
    }
  }
}

template <typename P, typename G>
__global__ void adafactor_vector_apply_kernel(P* param, const G* grad, float* exp_avg,
                                              const float* exp_avg_sq, int64_t n,
                                              const double* scalars, AdafactorCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(exp_avg_sq[i])), to_f32(grad[i]));
    adafactor_apply(param, exp_avg, i, u, scalars, c);
  }
}

void adafactor_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                      const Tensor& exp_avg_sq, const Tensor& row, const Tensor& col,
                      const Tensor& col_factor, int64_t batch, int64_t rows, int64_t cols,
                      const Tensor& scalars, const AdafactorCoefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  const cudaStream_t stream = current_stream();
  auto* s = static_cast<double*>(scalars.data_ptr());
  float* m = exp_avg.defined() ? device_data<float>(exp_avg) : nullptr;
  const bool factored = row.defined();
  const int partial_grid = static_cast<int>(kPartials);
  HEADROOM_CUDA_DISPATCH_FLOAT(param.dtype(), P, {
    // The parameter's sum of squares, before it changes: partials 0 .. kPartials - 1.
    launch_sum_of_squares(static_cast<const P*>(param.data_ptr()), n, s, stream);
    HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), G, {
      const G* g = static_cast<const G*>(grad.data_ptr());
      if (factored) {
        adafactor_rows_kernel<G><<<blocks_for(batch * rows * 32), kThreads, 0, stream>>>(
            g, device_data<float>(row), batch * rows, cols, c);
        adafactor_cols_kernel<G><<<blocks_for(batch * cols), kThreads, 0, stream>>>(
            g, device_data<float>(col), device_data<float>(col_factor), batch, rows, cols, c);
        adafactor_row_mean_kernel<<<static_cast<unsigned>(batch), kThreads, 0, stream>>>(
            device_data<float>(row), rows, s);
        adafactor_factored_sumsq_kernel<G><<<partial_grid, kThreads, 0, stream>>>(
            g, device_data<float>(row), device_data<float>(col_factor), batch, rows, cols, s);
      } else {
        adafactor_vector_kernel<G>
            <<<partial_grid, kThreads, 0, stream>>>(g, device_data<float>(exp_avg_sq), n, c, s);
      }
      adafactor_finish_kernel<<<1, 1, 0, stream>>>(s, n, c);
      if (factored) {
        adafactor_factored_apply_kernel<P, G><<<blocks_for(batch * rows, 1), kThreads, 0, stream>>>(
            static_cast<P*>(param.data_ptr()), g, m, device_data<float>(row),
            device_data<float>(col_factor), batch, rows, cols, s, c);
      } else {
        adafactor_vector_apply_kernel<P, G><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<P*>(param.data_ptr()), g, m, device_data<float>(exp_avg_sq), n, s, c);
      }
    });
  });
  check_launch();
}

}  // namespace

void fill_adafactor_kernels(AdafactorKernels& kernels) { kernels.update = adafactor_update; }

}  // namespace headroom::cuda
