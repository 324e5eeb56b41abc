// layer_norm and rms_norm: shapes and dtypes, the buffers, then the device's norm kernels
// (backend/norm_kernels.h), the same on every device. Backward keeps the input itself (no copy),
// the weight, and per row the fp32 statistics (mean and rstd for LayerNorm, rstd for RMSNorm: 4
// or 8 bytes a row); x-hat is recomputed from them, which costs less than storing a second
// activation.
#include "ops/norm.h"

#include "autograd/function_node.h"
#include "backend/norm_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

struct NormDims {
  int64_t rows;
  int64_t dim;
};

NormDims norm_dims(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_floating(op, "x", x);
  if (weight.defined()) check_floating(op, "weight", weight);
  if (bias.defined()) check_floating(op, "bias", bias);
  check_same_device(op, {x, weight, bias});
  if (x.ndim() < 1 || x.size(-1) == 0) {
    throw ValueError(str_cat(op, ": x ", x.shape(), " must have a last dimension of size > 0"));
  }
  const int64_t dim = x.size(-1);
  for (const auto& [name, t] : {std::pair{"weight", &weight}, std::pair{"bias", &bias}}) {
    if (t->defined() && (t->ndim() != 1 || t->size(0) != dim)) {
      throw ValueError(str_cat(op, ": ", name, " ", t->shape(), " must be [", dim,
                               "], the last dimension of x ", x.shape()));
    }
  }
  return {x.numel() / dim, dim};
}

// Gradients of layer_norm (centred) or rms_norm from the saved x, weight and statistics: dx in
// x's dtype, dweight / dbias in f32 from per-block partial sums (norm_backward_blocks).
std::vector<Tensor> norm_backward(BackwardContext& ctx, bool centred, const NormDims& dims,
                                  bool has_bias, float weight_offset) {
  const char* op = centred ? "layer_norm backward" : "rms_norm backward";
  const Tensor x = ctx.saved(0).contiguous();
  const Tensor g = contiguous_as(ctx.grad_output(), x.dtype());
  const Tensor w = ctx.saved(1).defined() ? ctx.saved(1).contiguous() : Tensor();
  const Tensor mean = centred ? ctx.saved(2) : Tensor();
  const Tensor rstd = ctx.saved(centred ? 3 : 2);
  const Device device = x.device();
  Tensor dx, dweight, dbias, partial;
  if (ctx.needs_input_grad(0)) dx = Tensor::empty(x.shape(), x.dtype(), device);
  if (w.defined() && ctx.needs_input_grad(1))
    dweight = Tensor::empty({dims.dim}, DType::f32, device);
  if (has_bias && ctx.needs_input_grad(2)) dbias = Tensor::empty({dims.dim}, DType::f32, device);
  if (dweight.defined() || dbias.defined()) {
    partial = Tensor::empty({norm_backward_blocks(dims.rows), 2, dims.dim}, DType::f32, device);
  }
  if (centred) {
    need_kernel(op, device, &NormKernels::layer_norm_backward)(g, x, w, mean, rstd, dx, dweight,
                                                               dbias, partial);
    return {dx, dweight, dbias};
  }
  need_kernel(op, device, &NormKernels::rms_norm_backward)(g, x, w, weight_offset, rstd, dx,
                                                           dweight, partial);
  return {dx, dweight};
}

// out in out_dtype, f32 statistics, x and weight read as they are (bias in the weight's dtype,
// as the kernels take it). weight_offset: rms_norm's (0 for layer_norm).
Tensor norm_forward(const char* op, bool centred, const Tensor& x, const Tensor& weight,
                    const Tensor& bias, double eps, DType out_dtype, float weight_offset = 0.0f) {
  if (!is_floating(out_dtype)) {
    throw ValueError(str_cat(op, ": out_dtype ", dtype_name(out_dtype), " is not a float dtype"));
  }
  const NormDims dims = norm_dims(op, x, weight, bias);
  const Device device = x.device();
  const Tensor xc = x.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor b;
  if (bias.defined())
    b = weight.defined() ? contiguous_as(bias, weight.dtype()) : bias.contiguous();
  Tensor out = Tensor::empty(x.shape(), out_dtype, device);
  Tensor mean = centred ? Tensor::empty({dims.rows}, DType::f32, device) : Tensor();
  Tensor rstd = Tensor::empty({dims.rows}, DType::f32, device);
  if (centred) {
    need_kernel(op, device, &NormKernels::layer_norm_forward)(xc, w, b, static_cast<float>(eps),
                                                              out, mean, rstd);
  } else {
    need_kernel(op, device, &NormKernels::rms_norm_forward)(xc, w, static_cast<float>(eps),
                                                            weight_offset, out, rstd);
  }
  const char* name = centred ? "LayerNormBackward0" : "RmsNormBackward0";
  if (auto node = make_function_node(
          name, centred ? std::vector<Tensor>{x, weight, bias} : std::vector<Tensor>{x, weight})) {
    node->save(x);
    node->save(weight);
    if (centred) node->save(mean);
    node->save(rstd);
    const bool has_bias = bias.defined();
    node->set_backward([centred, dims, has_bias, weight_offset](BackwardContext& ctx) {
      return norm_backward(ctx, centred, dims, has_bias, weight_offset);
    });
    // A narrowed result's consumers may hand its gradient back in x's dtype (as to a cast):
    // backward reads it in that dtype anyway.
    if (x.dtype() == DType::f32 && (out_dtype == DType::bf16 || out_dtype == DType::f16)) {
      node->accept_grad_in(DType::f32);
    }
    node->set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  std::optional<DType> out_dtype) {
  RecordFunction record("layer_norm", x, weight, bias);
  if (auto cast = autocast_inputs("layer_norm", {x, weight, bias})) {
    return layer_norm((*cast)[0], (*cast)[1], (*cast)[2], eps, out_dtype);
  }
  return norm_forward("layer_norm", true, x, weight, bias, eps, out_dtype.value_or(x.dtype()));
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, std::optional<DType> out_dtype,
                double weight_offset) {
  RecordFunction record("rms_norm", x, weight);
  if (auto cast = autocast_inputs("rms_norm", {x, weight}))
    return rms_norm((*cast)[0], (*cast)[1], eps, out_dtype, weight_offset);
  return norm_forward("rms_norm", false, x, weight, Tensor(), eps, out_dtype.value_or(x.dtype()),
                      static_cast<float>(weight_offset));
}

}  // namespace headroom
