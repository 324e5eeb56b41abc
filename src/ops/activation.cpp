// gelu, silu and swiglu. Each saves only its inputs and recomputes the activation in backward, so
// an MLP keeps no activation-sized buffer beyond what its linears already save.
#include "ops/activation.h"

#include "autograd/function_node.h"
#include "backend/activation_kernels.h"
#include "backend/cpu/activation.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

using UnaryKernel = void (*)(const float* x, float* y, int64_t n);
using UnaryGradKernel = void (*)(const float* x, const float* dy, float* dx, int64_t n);
using UnaryEntry = Kernel<void(const Tensor& x, const Tensor& out)> ActivationKernels::*;
using UnaryGradEntry = Kernel<void(const Tensor& x, const Tensor& grad_out,
                                   const Tensor& grad_in)> ActivationKernels::*;

// A unary activation's kernels: the CPU's and the native table's entries.
struct UnaryKernels {
  UnaryKernel cpu_forward;
  UnaryGradKernel cpu_backward;
  UnaryEntry forward;
  UnaryGradEntry backward;
};

Tensor unary_forward(const char* op, const UnaryKernels& kernels, const Tensor& x) {
  const OpRoute route = op_route(op, x.device());
  if (route.native) {
    Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
    if (route.kernels) route.need(kernels.forward)(x.contiguous(), out);
    return out;
  }
  Tensor out = Tensor::empty(x.shape(), DType::f32, x.device());
  const Tensor xf = f32_contiguous(x);
  if (route.cpu) kernels.cpu_forward(xf.data<float>(), out.data<float>(), out.numel());
  return to_dtype(out, x.dtype());
}

// x's gradient, in x's dtype on a native device.
Tensor unary_backward(const char* op, const UnaryKernels& kernels, const Tensor& x,
                      const Tensor& grad_out) {
  const OpRoute route = op_route(op, grad_out.device());
  if (route.native) {
    Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
    if (route.kernels) {
      route.need(kernels.backward)(x.contiguous(), grad_out.contiguous(), gx);
    }
    return gx;
  }
  const Tensor g = f32_contiguous(grad_out);
  const Tensor xf = f32_contiguous(x);
  Tensor gx = Tensor::empty(xf.shape(), DType::f32, g.device());
  if (route.cpu) kernels.cpu_backward(xf.data<float>(), g.data<float>(), gx.data<float>(), gx.numel());
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

}  // namespace

Tensor gelu(const Tensor& x) {
  return unary_activation("gelu", "GeluBackward0",
                          {cpu::gelu_forward, cpu::gelu_backward, &ActivationKernels::gelu_forward,
                           &ActivationKernels::gelu_backward},
                          x);
}

Tensor silu(const Tensor& x) {
  return unary_activation("silu", "SiluBackward0",
                          {cpu::silu_forward, cpu::silu_backward, &ActivationKernels::silu_forward,
                           &ActivationKernels::silu_backward},
                          x);
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  RecordFunction record("swiglu", gate, up);
  check_floating("swiglu", "gate", gate);
  check_floating("swiglu", "up", up);
  check_same_device("swiglu", {gate, up});
  if (gate.shape() != up.shape()) {
    throw ValueError(str_cat("swiglu: gate ", gate.shape(), " and up ", up.shape(),
                             " must have the same shape"));
  }
  const DType out_dtype = gate.dtype() == up.dtype() ? gate.dtype() : DType::f32;
  const OpRoute route = op_route("swiglu", gate.device());
  Tensor out;
  if (route.native) {
    out = Tensor::empty(gate.shape(), out_dtype, gate.device());
    if (route.kernels) {
      route.need(&ActivationKernels::swiglu_forward)(gate.contiguous(), up.contiguous(), out);
    }
  } else {
    out = Tensor::empty(gate.shape(), DType::f32, gate.device());
    const Tensor gf = f32_contiguous(gate);
    const Tensor uf = f32_contiguous(up);
    if (route.cpu) {
      cpu::swiglu_forward(gf.data<float>(), uf.data<float>(), out.data<float>(), out.numel());
    }
    out = to_dtype(out, out_dtype);
  }
  if (auto node = make_function_node("SwigluBackward0", {gate, up})) {
    node->save(gate);
    node->save(up);
    node->set_backward([](BackwardContext& ctx) -> std::vector<Tensor> {
      const OpRoute back = op_route("swiglu backward", ctx.grad_output().device());
      if (back.native) {
        const Tensor& gate_saved = ctx.saved(0);
        const Tensor& up_saved = ctx.saved(1);
        Tensor d_gate, d_up;
        if (ctx.needs_input_grad(0)) {
          d_gate = Tensor::empty(gate_saved.shape(), gate_saved.dtype(), gate_saved.device());
        }
        if (ctx.needs_input_grad(1)) {
          d_up = Tensor::empty(up_saved.shape(), up_saved.dtype(), up_saved.device());
        }
        if (back.kernels) {
          back.need(&ActivationKernels::swiglu_backward)(gate_saved.contiguous(),
                                                         up_saved.contiguous(),
                                                         ctx.grad_output().contiguous(), d_gate,
                                                         d_up);
        }
        return {d_gate, d_up};
      }
      const Tensor g = f32_contiguous(ctx.grad_output());
      const Tensor gate_f = f32_contiguous(ctx.saved(0));
      const Tensor up_f = f32_contiguous(ctx.saved(1));
      const Device device = g.device();
      Tensor d_gate, d_up;
      if (ctx.needs_input_grad(0)) d_gate = Tensor::empty(g.shape(), DType::f32, device);
      if (ctx.needs_input_grad(1)) d_up = Tensor::empty(g.shape(), DType::f32, device);
      if (back.cpu) {
        cpu::swiglu_backward(gate_f.data<float>(), up_f.data<float>(), g.data<float>(),
                             d_gate.defined() ? d_gate.data<float>() : nullptr,
                             d_up.defined() ? d_up.data<float>() : nullptr, g.numel());
      }
      return {d_gate, d_up};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom
