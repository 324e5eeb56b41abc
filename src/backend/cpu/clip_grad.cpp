// Gradient-clipping loops. Narrow dtypes pass through a small fp32 staging buffer on the stack
// (the bulk conversions of core/dtype_convert.h), so every loop below runs on fp32 values.
#include "backend/cpu/clip_grad.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/pointwise_simd.h"
#include "core/dtype_convert.h"
#include "core/error.h"

namespace headroom::cpu {

namespace {

// Elements per thread below which the fork costs more than the pass over memory.
constexpr int64_t kGrain = 1 << 15;
// Elements staged in fp32 at a time for bf16 / f16 (8 KiB on the stack).
constexpr int64_t kStage = 2048;

// How many ranges for_each_range splits n elements into: one per thread, at most.
int64_t range_count(int64_t n) {
  return std::clamp<int64_t>(n / kGrain, 1, omp_get_max_threads());
}

// Calls fn(index, begin, end) on range_count(n) consecutive ranges of [0, n), in parallel, each
// but the last a multiple of 64 elements long (whole cache lines for every dtype here).
template <typename Fn>
void for_each_range(int64_t n, Fn fn) {
  const int64_t ranges = range_count(n);
  const int64_t per = ((n + ranges - 1) / ranges + 63) & ~int64_t{63};
#pragma omp parallel for num_threads(ranges) if (ranges > 1) schedule(static)
  for (int64_t r = 0; r < ranges; ++r) {
    const int64_t begin = std::min(n, r * per);
    const int64_t end = std::min(n, begin + per);
    if (begin < end) fn(r, begin, end);
  }
}

// Calls fn(values, count) on elements [begin, end) of x as fp32: in place for f32, through the
// staging buffer otherwise, rounded back into x afterwards when kWrite.
template <bool kWrite, typename Fn>
void for_each_f32_chunk(std::conditional_t<kWrite, void*, const void*> x, DType dtype,
                        int64_t begin, int64_t end, Fn fn) {
  using F32Ptr = std::conditional_t<kWrite, float*, const float*>;
  if (dtype == DType::f32) {
    fn(static_cast<F32Ptr>(x) + begin, end - begin);
    return;
  }
  using BytePtr = std::conditional_t<kWrite, char*, const char*>;
  const auto bytes = static_cast<BytePtr>(x);
  const size_t size = dtype_size(dtype);
  float stage[kStage];
  for (int64_t c = begin; c < end; c += kStage) {
    const int64_t count = std::min(kStage, end - c);
    convert_to_f32(bytes + c * size, dtype, stage, count);
    fn(stage, count);
    if constexpr (kWrite) convert_from_f32(stage, bytes + c * size, dtype, count);
  }
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

double add(double a, double b) { return a + b; }

double max_or_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}

// Folds accumulate(values, count) over x with combine: within each thread's range in order,
// then over the ranges in order, so the result depends only on the thread count.
template <typename Accumulate, typename Combine>
double reduce(const void* x, DType dtype, int64_t n, Accumulate accumulate, Combine combine) {
  std::vector<double> partials(range_count(n), 0.0);
  for_each_range(n, [&](int64_t r, int64_t begin, int64_t end) {
    double acc = 0.0;
    for_each_f32_chunk<false>(x, dtype, begin, end, [&](const float* values, int64_t count) {
      acc = combine(acc, accumulate(values, count));
    });
    partials[r] = acc;
  });
  double total = 0.0;
  for (double partial : partials) total = combine(total, partial);
  return total;
}

void check_dtype(const char* kernel, DType dtype) {
  HEADROOM_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, kernel,
                 ": needs f32, bf16 or f16, not ", dtype_name(dtype));
}

}  // namespace

double vector_norm(const void* x, DType dtype, int64_t n, double p) {
  check_dtype("cpu::vector_norm", dtype);
  if (n == 0) return 0.0;
  if (std::isinf(p)) return reduce(x, dtype, n, max_abs, max_or_nan);
  if (p == 2.0) return std::sqrt(reduce(x, dtype, n, sum_squares, add));
  if (p == 1.0) return reduce(x, dtype, n, sum_abs, add);
  const auto sum_pow = [p](const float* values, int64_t count) {
    return sum_abs_pow(values, count, p);
  };
  return std::pow(reduce(x, dtype, n, sum_pow, add), 1.0 / p);
}

void scale_in_place(void* x, DType dtype, int64_t n, float factor) {
  check_dtype("cpu::scale_in_place", dtype);
  for_each_range(n, [&](int64_t, int64_t begin, int64_t end) {
    for_each_f32_chunk<true>(x, dtype, begin, end, [factor](float* values, int64_t count) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) values[i] *= factor;
    });
  });
}

void clamp_in_place(void* x, DType dtype, int64_t n, float low, float high) {
  check_dtype("cpu::clamp_in_place", dtype);
  for_each_range(n, [&](int64_t, int64_t begin, int64_t end) {
    for_each_f32_chunk<true>(x, dtype, begin, end, [low, high](float* values, int64_t count) {
      for (int64_t i = 0; i < count; ++i) {
        const float v = values[i] < low ? low : values[i];
        values[i] = v > high ? high : v;  // comparisons with NaN are false: NaN stays
      }
    });
  });
}

}  // namespace headroom::cpu
