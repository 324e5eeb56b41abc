// The CPU's gradient checks (backend/grad_check_kernels.h), the counterpart of
// backend/cuda/grad_checks.cu: the partial p-norms of clip_grad_norm_ and LOMO and their
// combination into the total norm and clip factor, scaling and clamping in place, and the
// GradScaler's fused inf / NaN check and unscale. Gradients are read and written in their own
// dtype (f32, bf16, f16): bf16 / f16 elements are widened a tile at a time into a stack buffer,
// computed in fp32 and rounded once as they are written back, so no gradient is ever copied
// whole. Norm terms accumulate in double over a fixed grid of kNormPartialBlocks contiguous
// chunks, so results depend on the sizes alone, never on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/pointwise_simd.h"
#include "backend/grad_check_kernels.h"
#include "core/dtype_convert.h"
#include "core/error.h"

namespace headroom::cpu {

namespace {

// Elements below which one thread does the whole pass: the fork costs more.
constexpr int64_t kGrain = 1 << 15;
// Elements staged in fp32 at a time for bf16 / f16 (8 KiB on the stack).
constexpr int64_t kStage = 2048;

void check_dtype(const char* kernel, const Tensor& t) {
  HEADROOM_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16,
                 "cpu ", kernel, ": needs f32, bf16 or f16, not ", dtype_name(t.dtype()));
  HEADROOM_CHECK(t.is_contiguous(), "cpu ", kernel, ": the tensor ", t.shape(),
                 " must be contiguous");
}

// Calls fn(values, count) on elements [begin, end) of t as fp32: in place for f32, through a
// stack buffer otherwise, rounded back into t afterwards when kWrite.
template <bool kWrite, typename Fn>
void for_each_f32_chunk(const Tensor& t, int64_t begin, int64_t end, Fn fn) {
  if (t.dtype() == DType::f32) {
    fn(t.data<float>() + begin, end - begin);
    return;
  }
  char* bytes = static_cast<char*>(t.data_ptr());
  const auto size = static_cast<int64_t>(t.element_size());
  float stage[kStage];
  for (int64_t c = begin; c < end; c += kStage) {
    const int64_t count = std::min(kStage, end - c);
    convert_to_f32(bytes + c * size, t.dtype(), stage, static_cast<size_t>(count));
    fn(stage, count);
    if constexpr (kWrite) {
      convert_from_f32(stage, bytes + c * size, t.dtype(), static_cast<size_t>(count));
    }
  }
}

// Calls fn(values, count) on all of t as fp32 in chunks of kStage, split over the threads
// (each element's result does not depend on the split), writing back.
template <typename Fn>
void update_in_place(const Tensor& t, Fn fn) {
  const int64_t n = t.numel();
  const int64_t chunks = (n + kStage - 1) / kStage;
#pragma omp parallel for if (n > kGrain) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    for_each_f32_chunk<true>(t, c * kStage, std::min(n, (c + 1) * kStage), fn);
  }
}

// ---- norms

enum class NormKind { two, one, power, inf };

NormKind norm_kind(double p) {
  return std::isinf(p) ? NormKind::inf
         : p == 2.0    ? NormKind::two
         : p == 1.0    ? NormKind::one
                       : NormKind::power;
}

HEADROOM_SIMD_CLONES double sum_squares(const float* x, int64_t n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    sum += v * v;
  }
  return sum;
}

HEADROOM_SIMD_CLONES double sum_abs(const float* x, int64_t n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(x[i]));
  return sum;
}

double sum_abs_pow(const float* x, int64_t n, double p) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::pow(std::fabs(static_cast<double>(x[i])), p);
  return sum;
}

// max |x|, NaN when any element is NaN (as torch's max).
HEADROOM_SIMD_CLONES double max_abs(const float* x, int64_t n) {
  float max = 0.0f;
  int nan = 0;
#pragma omp simd reduction(max : max) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    max = a > max ? a : max;
    nan |= a != a;
  }
  return nan ? std::numeric_limits<double>::quiet_NaN() : max;
}

double max_or_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}

double fold(NormKind kind, double acc, double term) {
  return kind == NormKind::inf ? max_or_nan(acc, term) : acc + term;
}

// The fold of the terms of `count` fp32 values.
double terms_of(NormKind kind, double p, const float* x, int64_t count) {
  switch (kind) {
    case NormKind::two:
      return sum_squares(x, count);
    case NormKind::one:
      return sum_abs(x, count);
    case NormKind::power:
      return sum_abs_pow(x, count, p);
    case NormKind::inf:
      return max_abs(x, count);
  }
  return 0.0;
}

double finish_norm(NormKind kind, double folded, double p) {
  switch (kind) {
    case NormKind::two:
      return std::sqrt(folded);
    case NormKind::power:
      return std::pow(folded, 1.0 / p);
    case NormKind::one:
    case NormKind::inf:
      return folded;
  }
  return folded;
}

// Slot b of the row folds the terms of chunk b of x, kNormPartialBlocks chunks of equal length
// (the last ones shorter or empty: their slots hold 0).
void norm_partial_row(const Tensor& x, double p, const Tensor& partials, int64_t index) {
  ensure_flush_denormal();
  check_dtype("norm_partial", x);
  HEADROOM_CHECK(partials.element_size() == 8 && partials.ndim() == 2 &&
                     partials.size(1) == kNormPartialBlocks && index >= 0 &&
                     index < partials.size(0),
                 "cpu norm_partial: row ", index, " of partials ", partials.shape(),
                 " (8-byte slots, ", kNormPartialBlocks, " a row)");
  const NormKind kind = norm_kind(p);
  double* row = static_cast<double*>(partials.data_ptr()) + index * kNormPartialBlocks;
  const int64_t n = x.numel();
  const int64_t per = (n + kNormPartialBlocks - 1) / kNormPartialBlocks;
#pragma omp parallel for if (n > kGrain) schedule(static)
  for (int64_t b = 0; b < kNormPartialBlocks; ++b) {
    const int64_t begin = std::min(n, b * per), end = std::min(n, begin + per);
    double acc = 0.0;
    for_each_f32_chunk<false>(x, begin, end, [&](const float* values, int64_t count) {
      acc = fold(kind, acc, terms_of(kind, p, values, count));
    });
    row[b] = acc;
  }
}

void norm_partial(TensorList xs, double p, const Tensor& partials, int64_t first_row) {
  for (size_t i = 0; i < xs.size(); ++i) {
    norm_partial_row(xs[i], p, partials, first_row + static_cast<int64_t>(i));
  }
}

// Note [Gradient norms in fp32] (optim/clip_grad.h): each row's norm rounded to fp32, then the
// norm of those norms; the clip factor in fp32 as torch computes it.
void norm_combine(const Tensor& partials, int64_t count, double p, double max_norm, ClipRule rule,
                  const Tensor& result) {
  HEADROOM_CHECK(result.dtype() == DType::f32 && result.numel() == 2,
                 "cpu norm_combine: result must be f32 [2], not ", dtype_name(result.dtype()), " ",
                 result.shape());
  const NormKind kind = norm_kind(p);
  const auto* rows = static_cast<const double*>(partials.data_ptr());
  double total = 0.0;
  for (int64_t t = 0; t < count; ++t) {
    double acc = 0.0;
    for (int64_t s = 0; s < kNormPartialBlocks; ++s) {
      acc = fold(kind, acc, rows[t * kNormPartialBlocks + s]);
    }
    const float norm = static_cast<float>(finish_norm(kind, acc, p));
    total = fold(kind, total, terms_of(kind, p, &norm, 1));
  }
  const float norm = count == 0 ? 0.0f : static_cast<float>(finish_norm(kind, total, p));
  float* out = result.data<float>();
  out[0] = norm;
  const float shifted = norm + 1e-6f;
  if (rule == ClipRule::torch) {
    // torch: (1 / (total + 1e-6)) * max_norm, then clamp(max=1), which keeps a NaN.
    const float coef = (1.0f / shifted) * static_cast<float>(max_norm);
    out[1] = coef > 1.0f ? 1.0f : coef;
  } else {
    const float coef = static_cast<float>(max_norm) / shifted;
    out[1] = coef < 1.0f ? coef : 1.0f;
  }
}

void scale_by_device_factor(TensorList grads, const Tensor& factor) {
  ensure_flush_denormal();
  const float f = factor.data<float>()[1];
  if (f == 1.0f) return;
  for (const Tensor& grad : grads) {
    check_dtype("scale_by_device_factor", grad);
    update_in_place(grad, [f](float* values, int64_t count) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) values[i] *= f;
    });
  }
}

void clamp(TensorList grads, float low, float high) {
  ensure_flush_denormal();
  for (const Tensor& grad : grads) {
    check_dtype("clamp", grad);
    update_in_place(grad, [low, high](float* values, int64_t count) {
      for (int64_t i = 0; i < count; ++i) {
        const float v = values[i] < low ? low : values[i];
        values[i] = v > high ? high : v;  // comparisons with NaN are false: NaN stays
      }
    });
  }
}

// ---- GradScaler

// 1 when x is inf or NaN (all exponent bits set), else 0: no branch, so the loop vectorises.
inline uint32_t non_finite(float x) {
  return static_cast<uint32_t>((__builtin_bit_cast(uint32_t, x) & 0x7F800000u) == 0x7F800000u);
}

// torch's _amp_foreach_non_finite_check_and_unscale_: the check looks at the input, so a product
// that overflows is not reported; with inv_scale == 1 the gradient is only read, as torch skips
// the multiply there too, which keeps values the flush-to-zero mode would lose.
void unscale_and_check_one(const Tensor& grad, float inv_scale, const Tensor& found_inf) {
  check_dtype("unscale_and_check", grad);
  const int64_t n = grad.numel();
  const int64_t chunks = (n + kStage - 1) / kStage;
  uint32_t found = 0;
  const bool write = inv_scale != 1.0f;
#pragma omp parallel for reduction(| : found) if (n > kGrain) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kStage, end = std::min(n, begin + kStage);
    const auto check = [&found](const float* values, int64_t count) {
      uint32_t any = 0;
#pragma omp simd reduction(| : any)
      for (int64_t i = 0; i < count; ++i) any |= non_finite(values[i]);
      found |= any;
    };
    if (!write) {
      for_each_f32_chunk<false>(grad, begin, end, check);
      continue;
    }
    for_each_f32_chunk<true>(grad, begin, end, [&](float* values, int64_t count) {
      check(values, count);
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) values[i] *= inv_scale;
    });
  }
  if (found) found_inf.data<float>()[0] = 1.0f;
}

void unscale_and_check(TensorList grads, float inv_scale, const Tensor& found_inf) {
  ensure_flush_denormal();
  for (const Tensor& grad : grads) unscale_and_check_one(grad, inv_scale, found_inf);
}

}  // namespace

void fill_grad_check_kernels(GradCheckKernels& kernels) {
  kernels.norm_partial = norm_partial;
  kernels.norm_combine = norm_combine;
  kernels.scale_by_device_factor = scale_by_device_factor;
  kernels.clamp = clamp;
  kernels.unscale_and_check = unscale_and_check;
}

}  // namespace headroom::cpu
