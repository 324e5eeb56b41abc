// Softmax cross-entropy on CUDA, the formulas of backend/cpu/cross_entropy.cpp on logits in their
// own dtype (argument checks shared with it: backend/cross_entropy_kernels.h): one thread block per
// row, an online max / sum of exponentials in fp32 (forward) and one pass writing softmax -
// onehot (backward). Per-row losses are summed by a second kernel in a fixed order, so the loss
// repeats bit for bit without float atomics; no entry but count_targets reads anything back.
#include <cfloat>
#include <climits>
#include <cmath>
#include <mutex>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/row_access.h"
#include "backend/cuda/backend_parts.h"
#include "backend/exp_approx.h"
#include "core/element_io.h"

namespace headroom::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kRowWarps = kRowThreads / kWarpSize;
constexpr int kCountThreads = 1024;
constexpr int kMeanThreads = 512;

// count_targets' result: the count, then the first bad position (LLONG_MAX for none). One per
// device; count_targets holds a mutex from the launch to the read-back.
__device__ long long g_target_check[2];

__device__ __forceinline__ float flush_subnormal(float v) { return fabsf(v) < FLT_MIN ? 0.0f : v; }

// The running (max, sum of e^(x - max)) of a part of a row. -inf logits add nothing, as e^-inf
// does on the CPU; NaN logits make the sum NaN, as there.
__device__ __forceinline__ void add_logit(float& m, float& s, float v) {
  if (v > m) {
    s = s * exp_approx(m - v) + 1.0f;
    m = v;
  } else if (v != -INFINITY) {
    s += exp_approx(v - m);
  }
}

// Merges (m2, s2) into (m, s). Symmetric to the bit (the sum is one commutative addition), so
// the two lanes of a butterfly agree; a part that saw no finite logit (m = -inf) carries only
// its sum's NaN, if any.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) {
    s = s + s2;
  } else if (m == -INFINITY) {
    m = m2;
    s = s2 + s;
  } else {
    const float mx = fmaxf(m, m2);
    s = s * exp_approx(m - mx) + s2 * exp_approx(m2 - mx);
    m = mx;
  }
}

template <typename TI>
__global__ void __launch_bounds__(kCountThreads)
    count_targets_kernel(const TI* targets, int64_t n, int64_t vocab, int64_t ignore_index) {
  __shared__ long long counts[kCountThreads / kWarpSize];
  __shared__ long long firsts[kCountThreads / kWarpSize];
  long long count = 0, first = LLONG_MAX;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t v = targets[i];
    if (v == ignore_index) continue;
    if (v >= 0 && v < vocab) {
      ++count;
    } else if (first == LLONG_MAX) {
      first = i;
    }
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    count += __shfl_xor_sync(0xffffffffu, count, offset);
    first = min(first, __shfl_xor_sync(0xffffffffu, first, offset));
  }
  const int warp = threadIdx.x / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) {
    counts[warp] = count;
    firsts[warp] = first;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kCountThreads / kWarpSize; ++w) {
      count += counts[w];
      first = min(first, firsts[w]);
    }
    g_target_check[0] = count;
    g_target_check[1] = first;
  }
}

// lse[r] = log(sum_j e^logits[r, j]); row_loss[r] = lse[r] - logits[r, target[r]], 0 for an
// ignored row.
template <typename TL, typename TI, int N>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_forward_kernel(const TL* logits, int64_t row_stride, int64_t vocab,
                                 const TI* targets, int64_t ignore_index, float* lse,
                                 float* row_loss) {
  __shared__ float shared_m[kRowWarps];
  __shared__ float shared_s[kRowWarps];
  const int64_t r = blockIdx.x;
  const TL* x = logits + r * row_stride;
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < vocab / N; c += blockDim.x) {
    const Pack<TL, N> p = load_pack<TL, N>(x, c);
#pragma unroll
    for (int i = 0; i < N; ++i) add_logit(m, s, to_f32(p.v[i]));
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    combine(m, s, m2, s2);
  }
  const int warp = threadIdx.x / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  m = shared_m[0];
  s = shared_s[0];
  for (int w = 1; w < kRowWarps; ++w) combine(m, s, shared_m[w], shared_s[w]);
  const float row_lse = m + logf(s);
  lse[r] = row_lse;
  const int64_t t = targets[r];
  // The op has checked the targets; an unchecked bad one gives NaN rather than a wild read.
  row_loss[r] = t == ignore_index ? 0.0f : (t >= 0 && t < vocab) ? row_lse - to_f32(x[t]) : NAN;
}

// grad[r] = (softmax(logits[r]) - onehot(target[r])) * scale * g, zero for an ignored row, with
// g read from grad_scale (a 0-d tensor) when it is given. grad may be logits itself: each thread
// reads a pack and then writes the same pack. softcap > 0: times the cap's slope 1 - (x / c)^2 at
// each (capped) logit x.
template <typename TL, typename TG, typename TI, int N>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_backward_kernel(const TL* logits, int64_t row_stride, int64_t vocab,
                                  const float* lse, const TI* targets, int64_t ignore_index,
                                  float scale, float softcap, const void* grad_scale,
                                  DType grad_scale_dtype, TG* grad, int64_t grad_stride) {
  const int64_t r = blockIdx.x;
  const int64_t t = targets[r];
  TG* d = grad + r * grad_stride;
  const int64_t packs = vocab / N;
  if (t == ignore_index) {
    Pack<TG, N> zero;
#pragma unroll
    for (int i = 0; i < N; ++i) zero.v[i] = from_f32<TG>(0.0f);
    for (int64_t c = threadIdx.x; c < packs; c += blockDim.x) store_pack<TG, N>(d, c, zero);
    return;
  }
  const float s = grad_scale ? scale * load_as_f32(grad_scale, grad_scale_dtype) : scale;
  const float shift = lse[r];
  const TL* x = logits + r * row_stride;
  for (int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
    const Pack<TL, N> p = load_pack<TL, N>(x, c);
    Pack<TG, N> out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float x = to_f32(p.v[i]);
      float v = flush_subnormal(exp_approx(x - shift) * s);
      if (c * N + i == t) v -= s;
      if (softcap > 0.0f) {
        // Rounded as the CPU rounds it (no contraction into an FMA).
        const float tc = x / softcap;
        v = __fmul_rn(v, __fsub_rn(1.0f, __fmul_rn(tc, tc)));
      }
      out.v[i] = from_f32<TG>(v);
    }
    store_pack<TG, N>(d, c, out);
  }
}

// out = sum(row_loss) / count: per-thread sums in fp64 over a fixed stride, then a fixed tree.
__global__ void __launch_bounds__(kMeanThreads)
    mean_loss_kernel(const float* row_loss, int64_t rows, int64_t count, float* out) {
  __shared__ double sums[kMeanThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) sum += row_loss[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kMeanThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[0] = count == 0 ? NAN : static_cast<float>(sums[0] / static_cast<double>(count));
  }
}

template <typename T>
__global__ void scale_by_scalar_kernel(const T* x, const void* scalar, DType scalar_dtype,
                                       int64_t n, T* out) {
  const float factor = load_as_f32(scalar, scalar_dtype);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_f32<T>(to_f32(x[i]) * factor);
  }
}

// Runs fn with TI bound to the targets' index type.
template <typename Fn>
void with_index_type(const char* op, const Tensor& targets, Fn&& fn) {
  if (targets.dtype() == DType::i64) {
    fn(int64_t{});
  } else if (targets.dtype() == DType::i32) {
    fn(int32_t{});
  } else {
    throw ValueError(
        str_cat(op, ": targets must be i32 or i64, not ", dtype_name(targets.dtype())));
  }
}

int grid_of(const char* op, int64_t rows) {
  if (rows > INT_MAX) throw ValueError(str_cat(op, ": ", rows, " rows are too many"));
  return static_cast<int>(rows);
}

int64_t count_targets(const Tensor& targets, int64_t vocab, int64_t ignore_index,
                      int64_t* first_bad) {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  DeviceGuard guard(targets.device().index);
  const cudaStream_t stream = current_stream();
  with_index_type("count_targets", targets, [&](auto index) {
    using TI = decltype(index);
    count_targets_kernel<TI><<<1, kCountThreads, 0, stream>>>(
        static_cast<const TI*>(targets.data_ptr()), targets.numel(), vocab, ignore_index);
  });
  check_launch();
  long long result[2];
  HEADROOM_CUDA_CHECK(cudaMemcpyFromSymbolAsync(result, g_target_check, sizeof(result), 0,
                                                cudaMemcpyDeviceToHost, stream));
  HEADROOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (first_bad) *first_bad = result[1] == LLONG_MAX ? -1 : result[1];
  return result[0];
}

template <typename TL, typename TI>
void launch_forward(const Tensor& logits, const LogitRows& rows, const Tensor& targets,
                    int64_t ignore_index, const Tensor& lse, const Tensor& row_loss) {
  const TL* lp = static_cast<const TL*>(logits.data_ptr());
  constexpr int kPack = kPackOf<TL>;
  const bool packed = rows.vocab % kPack == 0 && rows.stride % kPack == 0 && is_aligned(lp, 16);
  const int grid = grid_of("cross_entropy", rows.rows);
  const TI* tp = static_cast<const TI*>(targets.data_ptr());
  float* lsep = static_cast<float*>(lse.data_ptr());
  float* lossp = static_cast<float*>(row_loss.data_ptr());
  if (packed) {
    cross_entropy_forward_kernel<TL, TI, kPack><<<grid, kRowThreads, 0, current_stream()>>>(
        lp, rows.stride, rows.vocab, tp, ignore_index, lsep, lossp);
  } else {
    cross_entropy_forward_kernel<TL, TI, 1><<<grid, kRowThreads, 0, current_stream()>>>(
        lp, rows.stride, rows.vocab, tp, ignore_index, lsep, lossp);
  }
  check_launch();
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                           const Tensor& lse, const Tensor& row_loss) {
  const char* op = "cross_entropy";
  const LogitRows rows = check_cross_entropy_forward(op, logits, targets, lse, row_loss);
  if (rows.rows == 0) return;
  DeviceGuard guard(logits.device().index);
  with_index_type(op, targets, [&](auto index) {
    using TI = decltype(index);
    HEADROOM_CUDA_DISPATCH_FLOAT(
        logits.dtype(), TL,
        launch_forward<TL, TI>(logits, rows, targets, ignore_index, lse, row_loss));
  });
}

template <typename TL, typename TG, typename TI>
void launch_backward(const Tensor& logits, const LogitRows& rows, const Tensor& lse,
                     const Tensor& targets, int64_t ignore_index, float scale, float softcap,
                     const Tensor& grad_scale, const Tensor& grad) {
  const TL* lp = static_cast<const TL*>(logits.data_ptr());
  TG* gp = static_cast<TG*>(grad.data_ptr());
  const int64_t grad_stride = grad.stride(0);
  constexpr int kPack = kPackOf<TL>;
  const bool packed = rows.vocab % kPack == 0 && rows.stride % kPack == 0 &&
                      grad_stride % kPack == 0 && is_aligned(lp, 16) &&
                      is_aligned(gp, sizeof(TG) * kPack);
  const int grid = grid_of("cross_entropy backward", rows.rows);
  const void* sp = grad_scale.defined() ? grad_scale.data_ptr() : nullptr;
  const DType sdtype = grad_scale.defined() ? grad_scale.dtype() : DType::f32;
  const float* lsep = static_cast<const float*>(lse.data_ptr());
  const TI* tp = static_cast<const TI*>(targets.data_ptr());
  if (packed) {
    cross_entropy_backward_kernel<TL, TG, TI, kPack><<<grid, kRowThreads, 0, current_stream()>>>(
        lp, rows.stride, rows.vocab, lsep, tp, ignore_index, scale, softcap, sp, sdtype, gp,
        grad_stride);
  } else {
    cross_entropy_backward_kernel<TL, TG, TI, 1><<<grid, kRowThreads, 0, current_stream()>>>(
        lp, rows.stride, rows.vocab, lsep, tp, ignore_index, scale, softcap, sp, sdtype, gp,
        grad_stride);
  }
  check_launch();
}

template <typename TL, typename TI>
void dispatch_grad_dtype(const Tensor& logits, const LogitRows& rows, const Tensor& lse,
                         const Tensor& targets, int64_t ignore_index, float scale, float softcap,
                         const Tensor& grad_scale, const Tensor& grad) {
  HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), TG,
                               launch_backward<TL, TG, TI>(logits, rows, lse, targets, ignore_index,
                                                           scale, softcap, grad_scale, grad));
}

void cross_entropy_backward(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            int64_t ignore_index, float scale, float softcap,
                            const Tensor& grad_scale, const Tensor& grad_logits) {
  const char* op = "cross_entropy backward";
  const LogitRows rows =
      check_cross_entropy_backward(op, logits, lse, targets, grad_scale, grad_logits);
  if (rows.rows == 0) return;
  DeviceGuard guard(logits.device().index);
  with_index_type(op, targets, [&](auto index) {
    using TI = decltype(index);
    HEADROOM_CUDA_DISPATCH_FLOAT(
        logits.dtype(), TL,
        dispatch_grad_dtype<TL, TI>(logits, rows, lse, targets, ignore_index, scale, softcap,
                                    grad_scale, grad_logits));
  });
}

void mean_loss(const Tensor& row_loss, int64_t count, const Tensor& out) {
  check_mean_loss(row_loss, out);
  DeviceGuard guard(out.device().index);
  mean_loss_kernel<<<1, kMeanThreads, 0, current_stream()>>>(
      static_cast<const float*>(row_loss.data_ptr()), row_loss.numel(), count,
      static_cast<float*>(out.data_ptr()));
  check_launch();
}

void scale_by_scalar(const Tensor& x, const Tensor& scalar, const Tensor& out) {
  check_scale_by_scalar(x, scalar, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(x.dtype(), T,
                               scale_by_scalar_kernel<T>
                               <<<blocks_for(n), kThreads, 0, current_stream()>>>(
                                   static_cast<const T*>(x.data_ptr()), scalar.data_ptr(),
                                   scalar.dtype(), n, static_cast<T*>(out.data_ptr())));
  check_launch();
}

}  // namespace

void fill_cross_entropy_kernels(CrossEntropyKernels& kernels) {
  kernels.count_targets = count_targets;
  kernels.forward = cross_entropy_forward;
  kernels.backward = cross_entropy_backward;
  kernels.mean_loss = mean_loss;
  kernels.scale_by_scalar = scale_by_scalar;
}

}  // namespace headroom::cuda
