// Gradient checks without a host read, each over a list of tensors in one launch: the partial
// norms of clip_grad_norm_ and LOMO, their combination into the total norm and clip factor on the
// device, scaling by that factor, clamping for clip_grad_value_, and the GradScaler's fused
// inf / NaN check and unscale into one found_inf flag.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/tensor_list.cuh"

namespace headroom::cuda {
namespace {

constexpr int64_t kPartials = kNormPartialBlocks;

// One row of partials per tensor of the list: block (b, i) of the grid does what block b of
// norm_partial_kernel (backend/cuda/reduce.cuh) does for tensor i alone, on that tensor's own
// grid of norm_partial_grid(n) blocks; the blocks past it write their slot's 0.
struct NormRows {
  ListTensor tensors[kTensorListCapacity];
  double* rows;  // row 0 of the list's first tensor
};
static_assert(sizeof(NormRows) + 64 <= kMaxKernelParameterBytes);

template <NormKind kKind>
__global__ void __launch_bounds__(kThreads) norm_partial_list_kernel(const NormRows a, double p) {
  const ListTensor& x = a.tensors[blockIdx.y];
  double* row = a.rows + int64_t{blockIdx.y} * kPartials;
  const int64_t grid = norm_partial_grid(x.n);
  if (blockIdx.x >= grid) {
    if (threadIdx.x == 0) row[blockIdx.x] = 0.0;
    return;
  }
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < x.n;
       i += grid * blockDim.x) {
    const double term = norm_term<kKind>(list_load(x, i), p);
    acc = kKind == NormKind::inf ? max_or_nan(acc, term) : acc + term;
  }
  acc = block_fold<kKind>(acc);
  if (threadIdx.x == 0) row[blockIdx.x] = acc;
}

void norm_partial(TensorList xs, double p, const Tensor& partials, int64_t first_row) {
  if (xs.empty()) return;
  HEADROOM_CHECK(xs.size() <= kTensorListCapacity, "cuda norm_partial: ", xs.size(),
                 " tensors in one list; at most ", kTensorListCapacity);
  NormRows a;
  for (size_t i = 0; i < xs.size(); ++i) {
    check_kernel_dtype("norm_partial", "tensor", xs[i].dtype());
    a.tensors[i] = ListTensor{xs[i].data_ptr(), xs[i].numel(), xs[i].dtype()};
  }
  a.rows = static_cast<double*>(partials.data_ptr()) + first_row * kPartials;
  DeviceGuard guard(partials.device().index);
  const dim3 grid(static_cast<unsigned>(kPartials), static_cast<unsigned>(xs.size()));
  const cudaStream_t stream = current_stream();
  if (std::isinf(p)) {
    norm_partial_list_kernel<NormKind::inf><<<grid, kThreads, 0, stream>>>(a, p);
  } else if (p == 2.0) {
    norm_partial_list_kernel<NormKind::two><<<grid, kThreads, 0, stream>>>(a, p);
  } else if (p == 1.0) {
    norm_partial_list_kernel<NormKind::one><<<grid, kThreads, 0, stream>>>(a, p);
  } else {
    norm_partial_list_kernel<NormKind::power><<<grid, kThreads, 0, stream>>>(a, p);
  }
  check_launch();
}

// A norm's final step from the fold of its terms (as backend/cpu/grad_checks.cpp).
__device__ double finish_norm(double folded, NormKind kind, double p) {
  switch (kind) {
    case NormKind::two:
      return sqrt(folded);
    case NormKind::one:
    case NormKind::inf:
      return folded;
    case NormKind::power:
      return pow(folded, 1.0 / p);
  }
  return folded;
}

__device__ double fold(double acc, double term, NormKind kind) {
  return kind == NormKind::inf ? max_or_nan(acc, term) : acc + term;
}

__device__ double term_of(float x, NormKind kind, double p) {
  switch (kind) {
    case NormKind::two:
      return norm_term<NormKind::two>(x, p);
    case NormKind::one:
      return norm_term<NormKind::one>(x, p);
    case NormKind::power:
      return norm_term<NormKind::power>(x, p);
    case NormKind::inf:
      return norm_term<NormKind::inf>(x, p);
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

void norm_combine(const Tensor& partials, int64_t count, double p, double max_norm, ClipRule rule,
                  const Tensor& result) {
  const NormKind kind = std::isinf(p) ? NormKind::inf
                        : p == 2.0    ? NormKind::two
                        : p == 1.0    ? NormKind::one
                                      : NormKind::power;
  DeviceGuard guard(result.device().index);
  norm_combine_kernel<<<1, kThreads, 0, current_stream()>>>(
      static_cast<const double*>(partials.data_ptr()), count, kind, p, static_cast<float>(max_norm),
      rule, device_data<float>(result));
  check_launch();
}

// The list kernels below: block b works on kListBlockElements elements of the tensor it covers
// (tensor_list.cuh), each thread on every kThreads-th one.
#define HEADROOM_LIST_ELEMENTS(list, t, i)                                    \
  const ListRange range = (list).blocks.range_of((list).tensors, blockIdx.x); \
  const ListTensor& t = (list).tensors[range.index];                          \
  for (int64_t i = range.begin + threadIdx.x; i < range.end; i += blockDim.x)

__global__ void scale_by_factor_kernel(const FloatList list, const float* factor) {
  const float f = factor[1];
  if (f == 1.0f) return;
  HEADROOM_LIST_ELEMENTS(list, x, i) list_store(x, i, __fmul_rn(list_load(x, i), f));
}

void scale_by_device_factor(TensorList grads, const Tensor& factor) {
  FloatList list;
  const int32_t blocks = fill_float_list("scale_by_device_factor", grads, list);
  if (blocks == 0) return;
  DeviceGuard guard(factor.device().index);
  scale_by_factor_kernel<<<blocks, kThreads, 0, current_stream()>>>(list,
                                                                    device_data<float>(factor));
  check_launch();
}

__global__ void clamp_kernel(const FloatList list, float low, float high) {
  HEADROOM_LIST_ELEMENTS(list, x, i) {
    const float v = list_load(x, i);
    const float lower = v < low ? low : v;
    list_store(x, i, lower > high ? high : lower);  // comparisons with NaN are false: NaN stays
  }
}

void clamp(TensorList grads, float low, float high) {
  FloatList list;
  const int32_t blocks = fill_float_list("clamp", grads, list);
  if (blocks == 0) return;
  DeviceGuard guard(grads.front().device().index);
  clamp_kernel<<<blocks, kThreads, 0, current_stream()>>>(list, low, high);
  check_launch();
}

// torch's _amp_foreach_non_finite_check_and_unscale_: every thread that sees inf / NaN stores 1
// to the flag (the same value from any thread: no atomics needed); with inv_scale 1 nothing is
// written back (as backend/cpu/grad_checks.cpp).
__global__ void unscale_and_check_kernel(const FloatList list, float inv_scale, float* found_inf) {
  bool found = false;
  HEADROOM_LIST_ELEMENTS(list, x, i) {
    const float v = list_load(x, i);
    found |= !isfinite(v);
    if (inv_scale != 1.0f) list_store(x, i, __fmul_rn(v, inv_scale));
  }
  if (found) *found_inf = 1.0f;
}

void unscale_and_check(TensorList grads, float inv_scale, const Tensor& found_inf) {
  FloatList list;
  const int32_t blocks = fill_float_list("unscale_and_check", grads, list);
  if (blocks == 0) return;
  DeviceGuard guard(found_inf.device().index);
  unscale_and_check_kernel<<<blocks, kThreads, 0, current_stream()>>>(
      list, inv_scale, device_data<float>(found_inf));
  check_launch();
}

#undef HEADROOM_LIST_ELEMENTS

}  // namespace

void fill_grad_check_kernels(GradCheckKernels& kernels) {
  kernels.norm_partial = norm_partial;
  kernels.norm_combine = norm_combine;
  kernels.scale_by_device_factor = scale_by_device_factor;
  kernels.clamp = clamp;
  kernels.unscale_and_check = unscale_and_check;
}

}  // namespace headroom::cuda
