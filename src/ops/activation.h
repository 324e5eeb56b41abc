// Activation functions of transformer MLPs, with backward.
#pragma once

#include "core/tensor.h"

namespace headroom {

// GPT-2's tanh form (HF "gelu_new", torch gelu(approximate="tanh")):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu(const Tensor& x);
// x * sigmoid(x)
Tensor silu(const Tensor& x);
// Llama's MLP gate: silu(gate) * up, in one pass (saves gate and up only).
Tensor swiglu(const Tensor& gate, const Tensor& up);
// Gemma's MLP gate: gelu(gate) * up with gelu's tanh form (gelu_pytorch_tanh), in one pass.
Tensor geglu(const Tensor& gate, const Tensor& up);
// Gemma 2's logit soft-capping: cap * tanh(x / cap) (transformers' order), cap > 0.
Tensor softcap(const Tensor& x, double cap);

}  // namespace headroom
