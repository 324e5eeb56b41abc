// Element-wise fp32 kernels. Arrays below kGrain elements stay on one thread: the fork costs more.
#include "backend/cpu/elementwise.h"

namespace headroom::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;
}

void add(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd if (n > kGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void sub(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd if (n > kGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
}

void mul(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd if (n > kGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void scale(const float* a, float alpha, float* out, int64_t n) {
#pragma omp parallel for simd if (n > kGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * alpha;
}

void axpby(const float* a, float alpha, const float* b, float beta, float* out, int64_t n) {
#pragma omp parallel for simd if (n > kGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * alpha + b[i] * beta;
}

}  // namespace headroom::cpu
