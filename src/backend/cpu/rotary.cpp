// Rotary position embedding on the CPU: one table of cos / sin per call, then a rotation of each
// (i, i + D/2) pair of every row.
#include "backend/cpu/rotary.h"

#include <cmath>

namespace headroom::cpu {

namespace {
constexpr int64_t kParallelGrain = int64_t{1} << 15;
}

void rotary_table(int64_t seq_len, int64_t head_dim, double theta, int64_t position_offset,
                  float* cos_sin) {
  const int64_t half = head_dim / 2;
  float* cos_table = cos_sin;
  float* sin_table = cos_sin + seq_len * half;
  const float base = static_cast<float>(theta);
#pragma omp parallel for if (seq_len * half > kParallelGrain / 8)
  for (int64_t t = 0; t < seq_len; ++t) {
    const float position = static_cast<float>(position_offset + t);
    for (int64_t i = 0; i < half; ++i) {
      // torch: 1.0 / (base ** (arange(0, D, 2).float() / D)), all in fp32.
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      const float inv_freq = 1.0f / std::pow(base, exponent);
      const float angle = position * inv_freq;
      cos_table[t * half + i] = std::cos(angle);
      sin_table[t * half + i] = std::sin(angle);
    }
  }
}

void rotary_apply(const float* x, const int64_t strides[4], const int64_t sizes[4],
                  const float* cos_sin, bool inverse, float* out) {
  const int64_t heads = sizes[1], seq_len = sizes[2], dim = sizes[3], half = dim / 2;
  const int64_t rows = sizes[0] * heads * seq_len;
  const float* cos_table = cos_sin;
  const float* sin_table = cos_sin + seq_len * half;
  // The inverse rotation is the forward one with -sin.
  const float sign = inverse ? -1.0f : 1.0f;
  const int64_t step = strides[3];
#pragma omp parallel for if (rows * dim > kParallelGrain)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t t = row % seq_len, h = (row / seq_len) % heads, b = row / (seq_len * heads);
    const float* xr = x + b * strides[0] + h * strides[1] + t * strides[2];
    const float* c = cos_table + t * half;
    const float* s = sin_table + t * half;
    float* o1 = out + row * dim;
    float* o2 = o1 + half;
    if (step == 1) {
      const float* x1 = xr;
      const float* x2 = xr + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float sn = sign * s[i];
        o1[i] = x1[i] * c[i] - x2[i] * sn;
        o2[i] = x2[i] * c[i] + x1[i] * sn;
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float sn = sign * s[i];
        const float x1 = xr[i * step], x2 = xr[(i + half) * step];
        o1[i] = x1 * c[i] - x2 * sn;
        o2[i] = x2 * c[i] + x1 * sn;
      }
    }
  }
}

}  // namespace headroom::cpu
