// gelu, silu and swiglu. Each saves only its inputs and recomputes the activation in backward, so
// an MLP keeps no activation-sized buffer beyond what its linears already save.
#include "ops/activation.h"

#include "autograd/function_node.h"
#include "backend/cpu/activation.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

using UnaryKernel = void (*)(const float* x, float* y, int64_t n);
using UnaryGradKernel = void (*)(const float* x, const float* dy, float* dx, int64_t n);

Tensor unary_forward(const char* op, UnaryKernel kernel, const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::f32, x.device());
  const Tensor xf = f32_contiguous(x);
  if (computes_on_cpu(op, x.device())) kernel(xf.data<float>(), out.data<float>(), out.numel());
  return to_dtype(out, x.dtype());
}

// A unary activation whose backward needs only x.
Tensor unary_activation(const char* op, const char* node_name, UnaryKernel forward,
                        UnaryGradKernel backward, const Tensor& x) {
  RecordFunction record(op, x);
  check_floating(op, "x", x);
  Tensor out = unary_forward(op, forward, x);
  if (auto node = make_function_node(node_name, {x})) {
    node->save(x);
    node->set_backward([op, backward](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor g = f32_contiguous(ctx.grad_output());
      const Tensor xf = f32_contiguous(ctx.saved(0));
      Tensor gx = Tensor::empty(xf.shape(), DType::f32, g.device());
      if (computes_on_cpu(op, g.device())) {
        backward(xf.data<float>(), g.data<float>(), gx.data<float>(), gx.numel());
      }
      return {gx};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor gelu(const Tensor& x) {
  return unary_activation("gelu", "GeluBackward0", cpu::gelu_forward, cpu::gelu_backward, x);
}

Tensor silu(const Tensor& x) {
  return unary_activation("silu", "SiluBackward0", cpu::silu_forward, cpu::silu_backward, x);
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
  Tensor out = Tensor::empty(gate.shape(), DType::f32, gate.device());
  const Tensor gf = f32_contiguous(gate);
  const Tensor uf = f32_contiguous(up);
  if (computes_on_cpu("swiglu", gate.device())) {
    cpu::swiglu_forward(gf.data<float>(), uf.data<float>(), out.data<float>(), out.numel());
  }
  out = to_dtype(out, gate.dtype() == up.dtype() ? gate.dtype() : DType::f32);
  if (auto node = make_function_node("SwigluBackward0", {gate, up})) {
    node->save(gate);
    node->save(up);
    node->set_backward([](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor g = f32_contiguous(ctx.grad_output());
      const Tensor gate_f = f32_contiguous(ctx.saved(0));
      const Tensor up_f = f32_contiguous(ctx.saved(1));
      const Device device = g.device();
      Tensor d_gate, d_up;
      if (ctx.needs_input_grad(0)) d_gate = Tensor::empty(g.shape(), DType::f32, device);
      if (ctx.needs_input_grad(1)) d_up = Tensor::empty(g.shape(), DType::f32, device);
      if (computes_on_cpu("swiglu backward", device)) {
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
