// The inf / NaN check and unscale, one pass per gradient; OpenMP over large arrays, and a loop
// the compiler vectorises (the check compares exponent bits, so it needs no branch).
#include "backend/cpu/grad_scaler.h"

namespace headroom::cpu {

namespace {

// Elements below which one thread does the whole array: the fork costs more.
constexpr int64_t kGrain = 1 << 15;

// 1 when x is inf or NaN (all exponent bits set), else 0.
inline uint32_t non_finite(float x) {
  return static_cast<uint32_t>((__builtin_bit_cast(uint32_t, x) & 0x7F800000u) == 0x7F800000u);
}

template <typename T>
bool check_and_unscale(T* data, int64_t n, float inv_scale) {
  uint32_t found = 0;
  if (inv_scale == 1.0f) {
#pragma omp parallel for simd reduction(| : found) if (n > kGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) found |= non_finite(static_cast<float>(data[i]));
    return found != 0;
  }
#pragma omp parallel for simd reduction(| : found) if (n > kGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float value = static_cast<float>(data[i]);
    found |= non_finite(value);
    data[i] = static_cast<T>(value * inv_scale);
  }
  return found != 0;
}

}  // namespace

bool non_finite_check_and_unscale(float* data, int64_t n, float inv_scale) {
  return check_and_unscale(data, n, inv_scale);
}

bool non_finite_check_and_unscale(BFloat16* data, int64_t n, float inv_scale) {
  return check_and_unscale(data, n, inv_scale);
}

bool non_finite_check_and_unscale(Half* data, int64_t n, float inv_scale) {
  return check_and_unscale(data, n, inv_scale);
}

}  // namespace headroom::cpu
