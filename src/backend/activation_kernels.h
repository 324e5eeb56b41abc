// The activations' kernel table (Note [Kernel tables] in backend/kernel_table.h): computed in fp32
// from the inputs' own dtypes; gelu is the tanh approximation.
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
};

}  // namespace headroom
