// add / sub / mul / scale: the output in the inputs' dtype (f32 when they differ), then the
// device's element-wise kernels (backend/elementwise_kernels.h), the same on every device. Inputs
// of different shapes are broadcast; their gradients are summed back to each input's shape.
#include "ops/elementwise.h"

#include "autograd/function_node.h"
#include "backend/elementwise_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/op_support.h"
#include "ops/reduction.h"

namespace headroom {

namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
  }
  return "?";
}

DType result_dtype(const Tensor& a, const Tensor& b) {
  // Promotion among floating formats: equal dtypes stay, anything mixed computes in f32.
  return a.dtype() == b.dtype() ? a.dtype() : DType::f32;
}

// The raw computation, no autograd: the output in the result dtype, then the device's entry,
// which reads broadcast operands through their zero strides (nothing is materialised).
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  check_floating(name, "a", a);
  check_floating(name, "b", b);
  check_same_device(name, {a, b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, result_dtype(a, b), a.device());
  need_kernel(name, a.device(), &ElementwiseKernels::binary)(
      op, a.shape() == shape ? a : a.expand(shape), b.shape() == shape ? b : b.expand(shape), out);
  return out;
}

Tensor scale_forward(const Tensor& x, double factor) {
  check_floating("scale", "x", x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  need_kernel("scale", x.device(), &ElementwiseKernels::scale)(x.contiguous(),
                                                               static_cast<float>(factor), out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  RecordFunction record(binary_name(op), a, b);
  Tensor out = binary_forward(op, a, b);
  const char* node_name = op == BinaryOp::add   ? "AddBackward0"
                          : op == BinaryOp::sub ? "SubBackward0"
                                                : "MulBackward0";
  if (auto node = make_function_node(node_name, {a, b})) {
    const Shape a_shape = a.shape(), b_shape = b.shape();
    if (op == BinaryOp::mul) {
      node->save(a);
      node->save(b);
    }
    node->set_backward([op, a_shape, b_shape](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& g = ctx.grad_output();
      Tensor ga, gb;
      if (op == BinaryOp::mul) {
        if (ctx.needs_input_grad(0))
          ga = sum_to_shape(binary_forward(BinaryOp::mul, g, ctx.saved(1)), a_shape);
        if (ctx.needs_input_grad(1))
          gb = sum_to_shape(binary_forward(BinaryOp::mul, g, ctx.saved(0)), b_shape);
      } else {
        if (ctx.needs_input_grad(0)) ga = sum_to_shape(g, a_shape);
        if (ctx.needs_input_grad(1)) {
          gb = sum_to_shape(g, b_shape);
          if (op == BinaryOp::sub) gb = scale_forward(gb, -1.0);
        }
      }
      return {ga, gb};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b); }

Tensor scale(const Tensor& x, double factor) {
  RecordFunction record("scale", x);
  Tensor out = scale_forward(x, factor);
  if (auto node = make_function_node("ScaleBackward0", {x})) {
    node->set_backward([factor](BackwardContext& ctx) -> std::vector<Tensor> {
      return {scale_forward(ctx.grad_output(), factor)};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom
