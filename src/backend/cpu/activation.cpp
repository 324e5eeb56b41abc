// The CPU's activation kernels (backend/activation_kernels.h) on backend/cpu/pointwise_simd.h:
// each entry splits its tensors over threads and runs loops that have an AVX-512 clone (Note
// [AVX-512 clones of point-wise loops]), on tensors in their own dtypes: f32 operands in place,
// bf16 / f16 ones widened kWiden elements at a time and outputs rounded once on store, as the
// CUDA kernels load and store them.
#include <algorithm>
#include <array>

#include "backend/activation_kernels.h"
#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/pointwise_simd.h"
#include "backend/cpu/widen_rows.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kGrain =
    1 << 15;  // elements below which one thread does all: the fork costs more
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

// gelu(gate) * up, gelu as gelu_forward_range's.
HEADROOM_SIMD_CLONES void geglu_forward_range(const float* gate, const float* up, float* out,
                                              int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = gate[i];
    const float t = tanh_approx(kGeluScale * (v + kGeluCubic * v * v * v));
    out[i] = 0.5f * v * (1.0f + t) * up[i];
  }
}

HEADROOM_SIMD_CLONES void geglu_backward_range(const float* gate, const float* up,
                                               const float* d_out, float* d_gate, float* d_up,
                                               int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = gate[i];
    const float v2 = v * v;
    const float t = tanh_approx(kGeluScale * (v + kGeluCubic * v2 * v));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * v2);
    if (d_gate)
      d_gate[i] = d_out[i] * up[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du_dx);
    if (d_up) d_up[i] = d_out[i] * (0.5f * v * (1.0f + t));
  }
}

// cap * tanh(x / cap), in transformers' order (divide, tanh, multiply).
HEADROOM_SIMD_CLONES void softcap_forward_range(const float* x, float cap, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = tanh_approx(x[i] / cap) * cap;
}

HEADROOM_SIMD_CLONES void softcap_backward_range(const float* y, float cap, const float* dy,
                                                 float* dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float t = y[i] / cap;
    dx[i] = dy[i] * (1.0f - t * t);
  }
}

constexpr int64_t kWiden = 4096;  // elements widened at a time: the thread's scratch stays in L1/L2

// range(inputs, outputs, n) over contiguous tensors of one size (in[0]'s), kWiden elements at a
// time; an undefined output gets null pointers.
template <size_t kIn, size_t kOut, typename Range>
void map_widened(const std::array<const Tensor*, kIn>& in,
                 const std::array<const Tensor*, kOut>& out, Range range) {
  ensure_flush_denormal();
  parallel_ranges(in[0]->numel(), kGrain, 1, [&](int64_t b, int64_t e) {
    float* scratch = thread_scratch(static_cast<int64_t>(kIn + kOut) * kWiden);
    for (int64_t c = b; c < e; c += kWiden) {
      const int64_t m = std::min(kWiden, e - c);
      std::array<const float*, kIn> ip;
      std::array<float*, kOut> op;
      for (size_t k = 0; k < kIn; ++k) ip[k] = widen_span(*in[k], c, m, scratch + k * kWiden);
      for (size_t k = 0; k < kOut; ++k)
        op[k] = span_target(*out[k], c, scratch + (kIn + k) * kWiden);
      range(ip, op, m);
      for (size_t k = 0; k < kOut; ++k) store_span(*out[k], c, m, op[k]);
    }
  });
}

void gelu_forward(const Tensor& x, const Tensor& out) {
  map_widened<1, 1>({&x}, {&out},
                    [](auto ip, auto op, int64_t n) { gelu_forward_range(ip[0], op[0], n); });
}

void gelu_backward(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in) {
  map_widened<2, 1>({&x, &grad_out}, {&grad_in}, [](auto ip, auto op, int64_t n) {
    gelu_backward_range(ip[0], ip[1], op[0], n);
  });
}

void silu_forward(const Tensor& x, const Tensor& out) {
  map_widened<1, 1>({&x}, {&out},
                    [](auto ip, auto op, int64_t n) { silu_forward_range(ip[0], op[0], n); });
}

void silu_backward(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in) {
  map_widened<2, 1>({&x, &grad_out}, {&grad_in}, [](auto ip, auto op, int64_t n) {
    silu_backward_range(ip[0], ip[1], op[0], n);
  });
}

void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  map_widened<2, 1>({&gate, &up}, {&out}, [](auto ip, auto op, int64_t n) {
    swiglu_forward_range(ip[0], ip[1], op[0], n);
  });
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                     const Tensor& grad_gate, const Tensor& grad_up) {
  if (!grad_gate.defined() && !grad_up.defined()) return;
  map_widened<3, 2>({&gate, &up, &grad_out}, {&grad_gate, &grad_up},
                    [](auto ip, auto op, int64_t n) {
                      swiglu_backward_range(ip[0], ip[1], ip[2], op[0], op[1], n);
                    });
}

void geglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  map_widened<2, 1>({&gate, &up}, {&out}, [](auto ip, auto op, int64_t n) {
    geglu_forward_range(ip[0], ip[1], op[0], n);
  });
}

void geglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                    const Tensor& grad_gate, const Tensor& grad_up) {
  if (!grad_gate.defined() && !grad_up.defined()) return;
  map_widened<3, 2>({&gate, &up, &grad_out}, {&grad_gate, &grad_up},
                    [](auto ip, auto op, int64_t n) {
                      geglu_backward_range(ip[0], ip[1], ip[2], op[0], op[1], n);
                    });
}

void softcap_forward(const Tensor& x, float cap, const Tensor& out) {
  map_widened<1, 1>({&x}, {&out}, [cap](auto ip, auto op, int64_t n) {
    softcap_forward_range(ip[0], cap, op[0], n);
  });
}

void softcap_backward(const Tensor& out, float cap, const Tensor& grad_out, const Tensor& grad_in) {
  map_widened<2, 1>({&out, &grad_out}, {&grad_in}, [cap](auto ip, auto op, int64_t n) {
    softcap_backward_range(ip[0], cap, ip[1], op[0], n);
  });
}

}  // namespace

void fill_activation_kernels(ActivationKernels& kernels) {
  kernels.gelu_forward = gelu_forward;
  kernels.gelu_backward = gelu_backward;
  kernels.silu_forward = silu_forward;
  kernels.silu_backward = silu_backward;
  kernels.swiglu_forward = swiglu_forward;
  kernels.swiglu_backward = swiglu_backward;
  kernels.geglu_forward = geglu_forward;
  kernels.geglu_backward = geglu_backward;
  kernels.softcap_forward = softcap_forward;
  kernels.softcap_backward = softcap_backward;
}

}  // namespace headroom::cpu
