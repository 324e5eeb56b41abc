// gelu, silu, swiglu, geglu and softcap: the output or gradients in the inputs' dtypes, then the
// device's activation kernels (backend/activation_kernels.h), the same on every device. Each saves
// only its inputs and recomputes the activation in backward, so an MLP keeps no activation-sized
// buffer beyond what its linears already save; softcap saves its output, from which its
// derivative follows without a tanh.
#include "ops/activation.h"

#include "autograd/function_node.h"
#include "backend/activation_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

using UnaryEntry = Kernel<void(const Tensor& x, const Tensor& out)> ActivationKernels::*;
using UnaryGradEntry = Kernel<void(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in)>
    ActivationKernels::*;

// A unary activation's entries in the activation table.
struct UnaryKernels {
  UnaryEntry forward;
  UnaryGradEntry backward;
};

// out in x's dtype.
Tensor unary_forward(const char* op, const UnaryKernels& kernels, const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  need_kernel(op, x.device(), kernels.forward)(x.contiguous(), out);
  return out;
}

// x's gradient, in x's dtype.
Tensor unary_backward(const char* op, const UnaryKernels& kernels, const Tensor& x,
                      const Tensor& grad_out) {
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
  need_kernel(op, grad_out.device(), kernels.backward)(x.contiguous(), grad_out.contiguous(), gx);
  return gx;
}

// A unary activation whose backward needs only x.
Tensor unary_activation(const char* op, const char* node_name, const UnaryKernels& kernels,
                        const Tensor& x) {
  RecordFunction record(op, x);
  check_floating(op, "x", x);
  Tensor out = unary_forward(op, kernels, x);
  if (auto node = make_function_node(node_name, {x})) {
    node->save(x);
    node->set_backward([op, kernels](BackwardContext& ctx) -> std::vector<Tensor> {
      return {unary_backward(op, kernels, ctx.saved(0), ctx.grad_output())};
    });
    node->set_outputs({out});
  }
  return out;
}

using GatedEntry =
    Kernel<void(const Tensor& gate, const Tensor& up, const Tensor& out)> ActivationKernels::*;
using GatedGradEntry = Kernel<void(const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                                   const Tensor& grad_gate, const Tensor& grad_up)>
    ActivationKernels::*;

// A gated activation's entries (swiglu, geglu).
struct GatedKernels {
  GatedEntry forward;
  GatedGradEntry backward;
};

// act(gate) * up in one pass, saving gate and up only.
Tensor gated_activation(const char* op, const char* node_name, const GatedKernels& kernels,
                        const Tensor& gate, const Tensor& up) {
  RecordFunction record(op, gate, up);
  check_floating(op, "gate", gate);
  check_floating(op, "up", up);
  check_same_device(op, {gate, up});
  if (gate.shape() != up.shape()) {
    throw ValueError(
        str_cat(op, ": gate ", gate.shape(), " and up ", up.shape(), " must have the same shape"));
  }
  const DType out_dtype = gate.dtype() == up.dtype() ? gate.dtype() : DType::f32;
  Tensor out = Tensor::empty(gate.shape(), out_dtype, gate.device());
  need_kernel(op, gate.device(), kernels.forward)(gate.contiguous(), up.contiguous(), out);
  if (auto node = make_function_node(node_name, {gate, up})) {
    node->save(gate);
    node->save(up);
    node->set_backward([op, kernels](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& gate_saved = ctx.saved(0);
      const Tensor& up_saved = ctx.saved(1);
      Tensor d_gate, d_up;
      if (ctx.needs_input_grad(0)) {
        d_gate = Tensor::empty(gate_saved.shape(), gate_saved.dtype(), gate_saved.device());
      }
      if (ctx.needs_input_grad(1)) {
        d_up = Tensor::empty(up_saved.shape(), up_saved.dtype(), up_saved.device());
      }
      need_kernel(op, ctx.grad_output().device(), kernels.backward)(
          gate_saved.contiguous(), up_saved.contiguous(), ctx.grad_output().contiguous(), d_gate,
          d_up);
      return {d_gate, d_up};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor gelu(const Tensor& x) {
  return unary_activation("gelu", "GeluBackward0",
                          {&ActivationKernels::gelu_forward, &ActivationKernels::gelu_backward}, x);
}

Tensor silu(const Tensor& x) {
  return unary_activation("silu", "SiluBackward0",
                          {&ActivationKernels::silu_forward, &ActivationKernels::silu_backward}, x);
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  return gated_activation("swiglu", "SwigluBackward0",
                          {&ActivationKernels::swiglu_forward, &ActivationKernels::swiglu_backward},
                          gate, up);
}

Tensor geglu(const Tensor& gate, const Tensor& up) {
  return gated_activation("geglu", "GegluBackward0",
                          {&ActivationKernels::geglu_forward, &ActivationKernels::geglu_backward},
                          gate, up);
}

Tensor softcap(const Tensor& x, double cap) {
  RecordFunction record("softcap", x);
  check_floating("softcap", "x", x);
  if (!(cap > 0.0)) throw ValueError(str_cat("softcap: cap ", cap, " must be positive"));
  const float c = static_cast<float>(cap);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  need_kernel("softcap", x.device(), &ActivationKernels::softcap_forward)(x.contiguous(), c, out);
  if (auto node = make_function_node("SoftcapBackward0", {x})) {
    node->save(out);
    node->set_backward([c](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& y = ctx.saved(0);
      Tensor gx = Tensor::empty(y.shape(), y.dtype(), y.device());
      need_kernel("softcap backward", y.device(), &ActivationKernels::softcap_backward)(
          y, c, ctx.grad_output().contiguous(), gx);
      return {gx};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom
