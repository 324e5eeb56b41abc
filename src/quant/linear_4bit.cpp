// The 4-bit linear op: shapes, allocations, kernel calls and backward (see linear_4bit.h).
#include "quant/linear_4bit.h"

#include "autograd/function_node.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/cast.h"
#include "ops/reduction.h"
#include "ops/view_ops.h"

namespace headroom {

namespace {

int64_t leading_rows(const Tensor& x) {
  return x.ndim() == 0 ? 0 : x.numel() / std::max<int64_t>(x.size(-1), 1);
}

}  // namespace

Quant4bitOperand quant_4bit_operand(const Quant4bitWeight& weight) {
  HEADROOM_CHECK_VALUE(weight.shape.ndim() == 2, "linear_4bit: the 4-bit weight has shape ",
                       weight.shape, "; a linear weight is 2-D [out, in]");
  Quant4bitOperand op;
  op.packed = weight.packed;
  op.absmax = weight.absmax;
  op.nested = weight.nested;
  op.nested_absmax = weight.nested_absmax;
  op.nested_code = weight.nested_code;
  op.offset = weight.offset;
  op.type = weight.quant_type;
  op.blocksize = weight.blocksize;
  op.rows = weight.shape[0];
  op.cols = weight.shape[1];
  return op;
}

Tensor linear_4bit(const Tensor& x, const Quant4bitWeight& weight, const Tensor& bias,
                   DType compute_dtype) {
  RecordFunction record("linear_4bit", x, weight.packed, bias);
  if (compute_dtype != DType::f32 && compute_dtype != DType::bf16 && compute_dtype != DType::f16) {
    throw ValueError(str_cat("linear_4bit: compute dtype ", dtype_name(compute_dtype),
                             " is not f32, bf16 or f16 (bnb_4bit_compute_dtype)"));
  }
  const Quant4bitOperand w = quant_4bit_operand(weight);
  if (!is_floating(x.dtype()) || x.ndim() < 1 || x.size(-1) != w.cols) {
    throw ValueError(str_cat("linear_4bit: x ", x.shape(), " (", dtype_name(x.dtype()),
                             ") must be floating with ", w.cols,
                             " features, the 4-bit weight being ", weight.shape));
  }
  if (bias.defined() && (bias.ndim() != 1 || bias.size(0) != w.rows)) {
    throw ValueError(str_cat("linear_4bit: bias ", bias.shape(), " must be [", w.rows, "]"));
  }
  if (x.device() != weight.device() || (bias.defined() && bias.device() != x.device())) {
    throw ValueError(str_cat(
        "linear_4bit: x on ", x.device(), ", the 4-bit weight on ", weight.device(),
        bias.defined() ? str_cat(", bias on ", bias.device()) : "", ": all must be on one device"));
  }
  const DType input_dtype = x.dtype();
  // Autograd-recorded casts and copies: x and bias get their gradients through them.
  const Tensor xc = contiguous(cast(x, compute_dtype));
  const Tensor bc = bias.defined() ? contiguous(cast(bias, compute_dtype)) : Tensor();
  const int64_t rows = leading_rows(xc);
  std::vector<int64_t> out_dims = x.shape().to_vector();
  out_dims.back() = w.rows;
  const Device device = x.device();
  Tensor y = Tensor::empty(Shape(out_dims), compute_dtype, device);
  {
    const Tensor workspace =
        Tensor::empty({linear_4bit_forward_workspace(rows, w.cols, w.rows)}, DType::f32, device);
    // One code path on every device: the meta device's entry runs nothing.
    const auto& kernel =
        need_kernel("linear_4bit", device, &QuantizationKernels::linear_4bit_forward);
    if (rows > 0) kernel(xc, w, bc, workspace, y);
  }
  if (auto node = make_function_node("Linear4bitBackward0", {xc, bc})) {
    const Shape x_shape = xc.shape();
    const bool has_bias = bc.defined();
    // The weight's tensors are saved, not captured: saved-tensor hooks may keep them elsewhere
    // until backward (parameter offload keeps a block's 4-bit weights in the host pool).
    Quant4bitOperand layout = w;
    for (const Tensor* t : {&w.packed, &w.absmax, &w.nested_absmax, &w.nested_code}) {
      node->save(*t);
    }
    layout.packed = layout.absmax = layout.nested_absmax = layout.nested_code = Tensor();
    node->set_backward(
        [layout, x_shape, rows, has_bias, device](BackwardContext& ctx) -> std::vector<Tensor> {
          Quant4bitOperand w = layout;
          w.packed = ctx.saved(0);
          w.absmax = ctx.saved(1);
          w.nested_absmax = ctx.saved(2);
          w.nested_code = ctx.saved(3);
          const Tensor g = ctx.grad_output().contiguous();
          Tensor gx, gb;
          if (ctx.needs_input_grad(0)) {
            gx = Tensor::empty(x_shape, g.dtype(), device);
            const Tensor workspace = Tensor::empty(
                {linear_4bit_backward_workspace(rows, w.cols, w.rows)}, DType::f32, device);
            const auto& kernel = need_kernel("linear_4bit backward", device,
                                             &QuantizationKernels::linear_4bit_backward_input);
            if (rows > 0) kernel(g, w, workspace, gx);
          }
          if (has_bias && ctx.needs_input_grad(1)) gb = sum_to_shape(g, Shape{w.rows});
          return {gx, gb};
        });
    node->set_outputs({y});
  }
  return cast(y, input_dtype);
}

}  // namespace headroom
