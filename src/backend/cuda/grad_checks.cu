// Gradient checks without a host read per tensor: the partial norms of clip_grad_norm_ and LOMO,
// their combination into the total norm and clip factor on the device, scaling by that factor,
// clamping for clip_grad_value_, and the GradScaler's fused inf / NaN check and unscale into one
// found_inf flag.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/backend_parts.h"

namespace headroom::cuda {
namespace {

constexpr int64_t kPartials = kNormPartialBlocks;

void norm_partial(const Tensor& x, double p, const Tensor& partials, int64_t index) {
  double* row = static_cast<double*>(partials.data_ptr()) + index * kPartials;
  const int64_t n = x.numel();
  DeviceGuard guard(partials.device().index);
  const cudaStream_t stream = current_stream();
  HEADROOM_CUDA_DISPATCH_FLOAT(x.dtype(), T, {
    const T* data = static_cast<const T*>(x.data_ptr());
    if (std::isinf(p)) {
      launch_norm_partial<T, NormKind::inf>(data, n, p, row, stream);
    } else if (p == 2.0) {
      launch_norm_partial<T, NormKind::two>(data, n, p, row, stream);
    } else if (p == 1.0) {
      launch_norm_partial<T, NormKind::one>(data, n, p, row, stream);
    } else {
      launch_norm_partial<T, NormKind::power>(data, n, p, row, stream);
    }
  });
  check_launch();
}

// A norm's final step from the fold of its terms (as backend/cpu/grad_checks.cpp).
__device__ double finish_norm(double folded, NormKind kind, double p) {
  switch (kind) {
    case NormKind::two: return sqrt(folded);
    case NormKind::one:
    case NormKind::inf: return folded;
    case NormKind::power: return pow(folded, 1.0 / p);
  }
  return folded;
}

__device__ double fold(double acc, double term, NormKind kind) {
  return kind == NormKind::inf ? max_or_nan(acc, term) : acc + term;
}

__device__ double term_of(float x, NormKind kind, double p) {
  switch (kind) {
    case NormKind::two: return norm_term<NormKind::two>(x, p);
    case NormKind::one: return norm_term<NormKind::one>(x, p);
    case NormKind::power: return norm_term<NormKind::power>(x, p);
    case NormKind::inf: return norm_term<NormKind::inf>(x, p);
  }
  return 0.0;
}

// One block of kThreads: warp w takes tensors w, w + 8, ...; lane l folds slots l, l + 32, ...
// of a row in order, the lanes combine in a fixed tree, and lane 0 folds the tensor's fp32 norm
// into its warp's total; thread 0 then folds the warps' totals in order.
__global__ void __launch_bounds__(kThreads)
    norm_combine_kernel(const double* partials, int64_t count, NormKind kind, double p,
                        float max_norm, ClipRule rule, float* result) {
  constexpr int kWarps = kThreads / 32;
  __shared__ double warp_totals[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  double warp_total = 0.0;
  for (int64_t t = warp; t < count; t += kWarps) {
    const double* row = partials + t * kPartials;
    double acc = 0.0;
    for (int64_t s = lane; s < kPartials; s += 32) acc = fold(acc, row[s], kind);
    for (int offset = 16; offset > 0; offset >>= 1) {
      acc = fold(acc, __shfl_xor_sync(0xffffffffu, acc, offset), kind);
    }
    const float norm = static_cast<float>(finish_norm(acc, kind, p));
    warp_total = fold(warp_total, term_of(norm, kind, p), kind);
  }
  if (lane == 0) warp_totals[warp] = warp_total;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int w = 0; w < kWarps; ++w) total = fold(total, warp_totals[w], kind);
  const float norm = count == 0 ? 0.0f : static_cast<float>(finish_norm(total, kind, p));
  result[0] = norm;
  const float shifted = __fadd_rn(norm, 1e-6f);
  if (rule == ClipRule::torch) {
    const float coef = __fmul_rn(__fdiv_rn(1.0f, shifted), max_norm);
    result[1] = coef > 1.0f ? 1.0f : coef;  // torch.clamp(max=1) keeps NaN
  } else {
    const float coef = __fdiv_rn(max_norm, shifted);
    result[1] = coef < 1.0f ? coef : 1.0f;  // std::min(1.0f, coef)
  }
}

void norm_combine(const Tensor& partials, int64_t count, double p, double max_norm,
                  ClipRule rule, const Tensor& result) {
  const NormKind kind = std::isinf(p)  ? NormKind::inf
                        : p == 2.0     ? NormKind::two
                        : p == 1.0     ? NormKind::one
                                       : NormKind::power;
  DeviceGuard guard(result.device().index);
  norm_combine_kernel<<<1, kThreads, 0, current_stream()>>>(
      static_cast<const double*>(partials.data_ptr()), count, kind, p,
      static_cast<float>(max_norm), rule, device_data<float>(result));
  check_launch();
}

template <typename T>
__global__ void scale_by_factor_kernel(T* x, int64_t n, const float* factor) {
  const float f = factor[1];
  if (f == 1.0f) return;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = from_f32<T>(__fmul_rn(to_f32(x[i]), f));
  }
}

void scale_by_device_factor(const Tensor& grad, const Tensor& factor) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  DeviceGuard guard(grad.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), T,
      scale_by_factor_kernel<T><<<blocks_for(n), kThreads, 0, current_stream()>>>(
          static_cast<T*>(grad.data_ptr()), n, device_data<float>(factor)));
  check_launch();
}

template <typename T>
__global__ void clamp_kernel(T* x, int64_t n, float low, float high) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = to_f32(x[i]);
    const float lower = v < low ? low : v;
    x[i] = from_f32<T>(lower > high ? high : lower);  // comparisons with NaN are false: NaN stays
  }
}

void clamp(const Tensor& grad, float low, float high) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  DeviceGuard guard(grad.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), T,
      clamp_kernel<T><<<blocks_for(n), kThreads, 0, current_stream()>>>(
          static_cast<T*>(grad.data_ptr()), n, low, high));
  check_launch();
}

// torch's _amp_non_finite_check_and_unscale_: every thread that sees inf / NaN stores 1 to the
// flag (the same value from any thread: no atomics needed); with inv_scale 1 nothing is written
// back (as backend/cpu/grad_checks.cpp).
template <typename T>
__global__ void unscale_and_check_kernel(T* x, int64_t n, float inv_scale, float* found_inf) {
  bool found = false;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = to_f32(x[i]);
    found |= !isfinite(v);
    if (inv_scale != 1.0f) x[i] = from_f32<T>(__fmul_rn(v, inv_scale));
  }
  if (found) *found_inf = 1.0f;
}

void unscale_and_check(const Tensor& grad, float inv_scale, const Tensor& found_inf) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  DeviceGuard guard(grad.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), T,
      unscale_and_check_kernel<T><<<blocks_for(n), kThreads, 0, current_stream()>>>(
          static_cast<T*>(grad.data_ptr()), n, inv_scale, device_data<float>(found_inf)));
  check_launch();
}

}  // namespace

void fill_grad_check_kernels(GradCheckKernels& kernels) {
  kernels.norm_partial = norm_partial;
  kernels.norm_combine = norm_combine;
  kernels.scale_by_device_factor = scale_by_device_factor;
  kernels.clamp = clamp;
  kernels.unscale_and_check = unscale_and_check;
}

}  // namespace headroom::cuda
