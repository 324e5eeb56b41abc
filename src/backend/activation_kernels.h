// The activations' kernel table (Note [Kernel tables] in backend/kernel_table.h): computed in fp32
// from the inputs' own dtypes; gelu is the tanh approximation (geglu's too), and softcap is
// Gemma 2's logit cap.
#pragma once

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct ActivationKernels {
  static constexpr const char* kName = "activation";

  Kernel<void(const Tensor& x, const Tensor& out)> gelu_forward{"gelu_forward"};
  Kernel<void(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in)> gelu_backward{
      "gelu_backward"};
  Kernel<void(const Tensor& x, const Tensor& out)> silu_forward{"silu_forward"};
  Kernel<void(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in)> silu_backward{
      "silu_backward"};
  Kernel<void(const Tensor& gate, const Tensor& up, const Tensor& out)> swiglu_forward{
      "swiglu_forward"};
  // grad_gate / grad_up may each be undefined.
  Kernel<void(const Tensor& gate, const Tensor& up, const Tensor& grad_out, const Tensor& grad_gate,
              const Tensor& grad_up)>
      swiglu_backward{"swiglu_backward"};
  // Gemma's MLP gate: gelu(gate) * up; grad_gate / grad_up may each be undefined.
  Kernel<void(const Tensor& gate, const Tensor& up, const Tensor& out)> geglu_forward{
      "geglu_forward"};
  Kernel<void(const Tensor& gate, const Tensor& up, const Tensor& grad_out, const Tensor& grad_gate,
              const Tensor& grad_up)>
      geglu_backward{"geglu_backward"};
  // out = cap * tanh(x / cap) (out may be x itself); backward from that output:
  // grad_in = grad_out * (1 - (out / cap)^2).
  Kernel<void(const Tensor& x, float cap, const Tensor& out)> softcap_forward{"softcap_forward"};
  Kernel<void(const Tensor& out, float cap, const Tensor& grad_out, const Tensor& grad_in)>
      softcap_backward{"softcap_backward"};
};

}  // namespace headroom
