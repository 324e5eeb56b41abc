// gelu / silu / swiglu / geglu / softcap forward and backward on CUDA. Each reads its tensors' own
// dtypes, computes in fp32 with the CPU kernel's formula and constants (backend/cpu/activation.cpp)
// and rounds once to the output's dtype. The CPU's exp and tanh are its own polynomials
// (backend/cpu/pointwise_simd.h), here they are CUDA's expf / tanhf: both are within about two
// ulps of the exact value, so the activations agree with the CPU to a few ulps.
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/elementwise_map.cuh"

namespace headroom::cuda {
namespace {

// ---- activations: the formulas of backend/cpu/activation.cpp

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// d/dx x sigmoid(x) = s (1 + x (1 - s))
__device__ __forceinline__ float silu_derivative(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

struct GeluForward {
  __device__ void operator()(const float (&in)[1], float (&out)[1]) const {
    const float v = in[0];
    const float t = tanhf(kGeluScale * (v + kGeluCubic * v * v * v));
    out[0] = 0.5f * v * (1.0f + t);
  }
};

struct GeluBackward {  // in: x, dy; out: dx
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float v = in[0];
    const float v2 = v * v;
    const float t = tanhf(kGeluScale * (v + kGeluCubic * v2 * v));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * v2);
    out[0] = in[1] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du_dx);
  }
};

struct SiluForward {
  __device__ void operator()(const float (&in)[1], float (&out)[1]) const {
    out[0] = in[0] * sigmoid(in[0]);
  }
};

struct SiluBackward {  // in: x, dy; out: dx
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    out[0] = in[1] * silu_derivative(in[0]);
  }
};

struct SwigluForward {  // in: gate, up
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    out[0] = in[0] * sigmoid(in[0]) * in[1];
  }
};

struct SwigluBackward {  // in: gate, up, d_out; out: d_gate, d_up
  __device__ void operator()(const float (&in)[3], float (&out)[2]) const {
    const float g = in[0];
    const float s = sigmoid(g);
    out[0] = in[2] * in[1] * (s * (1.0f + g * (1.0f - s)));
    out[1] = in[2] * (g * s);
  }
};

void gelu_forward(const Tensor& x, const Tensor& out) {
  map<1, 1>("gelu", {x}, {out}, GeluForward{});
}

void gelu_backward(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in) {
  map<2, 1>("gelu backward", {x, grad_out}, {grad_in}, GeluBackward{});
}

void silu_forward(const Tensor& x, const Tensor& out) {
  map<1, 1>("silu", {x}, {out}, SiluForward{});
}

void silu_backward(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in) {
  map<2, 1>("silu backward", {x, grad_out}, {grad_in}, SiluBackward{});
}

void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  map<2, 1>("swiglu", {gate, up}, {out}, SwigluForward{});
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                     const Tensor& grad_gate, const Tensor& grad_up) {
  if (!grad_gate.defined() && !grad_up.defined()) return;
  map<3, 2>("swiglu backward", {gate, up, grad_out}, {grad_gate, grad_up}, SwigluBackward{});
}

// Gemma's gate: gelu(gate) * up.
struct GegluForward {  // in: gate, up
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float v = in[0];
    const float t = tanhf(kGeluScale * (v + kGeluCubic * v * v * v));
    out[0] = 0.5f * v * (1.0f + t) * in[1];
  }
};

struct GegluBackward {  // in: gate, up, d_out; out: d_gate, d_up
  __device__ void operator()(const float (&in)[3], float (&out)[2]) const {
    const float v = in[0];
    const float v2 = v * v;
    const float t = tanhf(kGeluScale * (v + kGeluCubic * v2 * v));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * v2);
    out[0] = in[2] * in[1] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du_dx);
    out[1] = in[2] * (0.5f * v * (1.0f + t));
  }
};

struct SoftcapForward {
  float cap;
  __device__ void operator()(const float (&in)[1], float (&out)[1]) const {
    out[0] = tanhf(in[0] / cap) * cap;
  }
};

struct SoftcapBackward {  // in: out, dy; out: dx
  float cap;
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float t = in[0] / cap;
    out[0] = in[1] * (1.0f - t * t);
  }
};

void geglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  map<2, 1>("geglu", {gate, up}, {out}, GegluForward{});
}

void geglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                    const Tensor& grad_gate, const Tensor& grad_up) {
  if (!grad_gate.defined() && !grad_up.defined()) return;
  map<3, 2>("geglu backward", {gate, up, grad_out}, {grad_gate, grad_up}, GegluBackward{});
}

void softcap_forward(const Tensor& x, float cap, const Tensor& out) {
  map<1, 1>("softcap", {x}, {out}, SoftcapForward{cap});
}

void softcap_backward(const Tensor& out, float cap, const Tensor& grad_out, const Tensor& grad_in) {
  map<2, 1>("softcap backward", {out, grad_out}, {grad_in}, SoftcapBackward{cap});
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

}  // namespace headroom::cuda
