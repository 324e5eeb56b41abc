// Activation kernels on backend/cpu/pointwise_simd.h: each public kernel splits its array over
// threads and runs a loop that has an AVX-512 clone (Note [AVX-512 clones of point-wise loops]).
#include "backend/cpu/activation.h"

#include "backend/cpu/pointwise_simd.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kGrain = 1 << 15;  // elements below which one thread does all: the fork costs more
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// d/dx x sigmoid(x) = s (1 + x (1 - s))
inline float silu_derivative(float x) {
  const float s = sigmoid_approx(x);
  return s * (1.0f + x * (1.0f - s));
}

HEADROOM_SIMD_CLONES void gelu_forward_range(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_approx(kGeluScale * (v + kGeluCubic * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

HEADROOM_SIMD_CLONES void gelu_backward_range(const float* x, const float* dy, float* dx,
                                              int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float v2 = v * v;
    const float t = tanh_approx(kGeluScale * (v + kGeluCubic * v2 * v));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * v2);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du_dx);
  }
}

HEADROOM_SIMD_CLONES void silu_forward_range(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid_approx(x[i]);
}

HEADROOM_SIMD_CLONES void silu_backward_range(const float* x, const float* dy, float* dx,
                                              int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * silu_derivative(x[i]);
}

HEADROOM_SIMD_CLONES void swiglu_forward_range(const float* gate, const float* up, float* out,
                                               int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid_approx(gate[i]) * up[i];
}

HEADROOM_SIMD_CLONES void swiglu_backward_range(const float* gate, const float* up,
                                                const float* d_out, float* d_gate, float* d_up,
                                                int64_t n) {
  if (d_gate && d_up) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      const float s = sigmoid_approx(g);
      d_gate[i] = d_out[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
      d_up[i] = d_out[i] * (g * s);
    }
  } else if (d_gate) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d_gate[i] = d_out[i] * up[i] * silu_derivative(gate[i]);
  } else if (d_up) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d_up[i] = d_out[i] * (gate[i] * sigmoid_approx(gate[i]));
  }
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n) {
  parallel_ranges(n, kGrain, 1, [&](int64_t b, int64_t e) { gelu_forward_range(x + b, y + b, e - b); });
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  parallel_ranges(n, kGrain, 1, [&](int64_t b, int64_t e) {
    gelu_backward_range(x + b, dy + b, dx + b, e - b);
  });
}

void silu_forward(const float* x, float* y, int64_t n) {
  parallel_ranges(n, kGrain, 1, [&](int64_t b, int64_t e) { silu_forward_range(x + b, y + b, e - b); });
}

void silu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  parallel_ranges(n, kGrain, 1, [&](int64_t b, int64_t e) {
    silu_backward_range(x + b, dy + b, dx + b, e - b);
  });
}

void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) {
  parallel_ranges(n, kGrain, 1, [&](int64_t b, int64_t e) {
    swiglu_forward_range(gate + b, up + b, out + b, e - b);
  });
}

void swiglu_backward(const float* gate, const float* up, const float* d_out, float* d_gate,
                     float* d_up, int64_t n) {
  parallel_ranges(n, kGrain, 1, [&](int64_t b, int64_t e) {
    swiglu_backward_range(gate + b, up + b, d_out + b, d_gate ? d_gate + b : nullptr,
                          d_up ? d_up + b : nullptr, e - b);
  });
}

}  // namespace headroom::cpu
