// fp32 CPU kernels of the MLP activations on contiguous arrays of n elements; each forward and
// each backward is one pass over memory.
#pragma once

#include <cstdint>

namespace headroom::cpu {

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_forward(const float* x, float* y, int64_t n);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);

// y = x sigmoid(x)
void silu_forward(const float* x, float* y, int64_t n);
void silu_backward(const float* x, const float* dy, float* dx, int64_t n);

// out = silu(gate) * up
void swiglu_forward(const float* gate, const float* up, float* out, int64_t n);
// Either of d_gate / d_up may be null when that gradient is not wanted.
void swiglu_backward(const float* gate, const float* up, const float* d_out, float* d_gate,
                     float* d_up, int64_t n);

}  // namespace headroom::cpu
