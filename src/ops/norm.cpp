// layer_norm and rms_norm: shapes and dtypes, the buffers, then the device's norm kernels
// (backend/norm_kernels.h), the same on every device. Backward keeps the input itself (no copy),
// the weight, and per row the fp32 statistics (mean and rstd for LayerNorm, rstd for RMSNorm: 4
// or 8 bytes a row); x-hat is recomputed from them, which costs less than storing a second
// activation.
#include "ops/norm.h"

#include "autograd/function_node.h"
#include "backend/norm_kernels.h"
#include "core/autocast_mode.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
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
// grad_out is the gradient of the norm's result (undefined: none reached it); grad_residual
// (undefined: none) the one x received by the residual stream, which dx then includes, summed
// in its buffer when this backward holds it alone (Note [Residual norms]).
struct NormGrads {
  Tensor dx, dweight, dbias;
};
NormGrads norm_grads(BackwardContext& ctx, bool centred, const NormDims& dims, bool has_bias,
                     float weight_offset, const Tensor& grad_out, Tensor grad_residual,
                     bool want_dx, bool want_dweight, bool want_dbias) {
  const char* op = centred ? "layer_norm backward" : "rms_norm backward";
  if (!grad_out.defined()) return {want_dx ? grad_residual : Tensor(), Tensor(), Tensor()};
  const Tensor x = ctx.saved(0).contiguous();
  const Tensor g = contiguous_as(grad_out, x.dtype());
  const Tensor w = ctx.saved(1).defined() ? ctx.saved(1).contiguous() : Tensor();
  const Tensor mean = centred ? ctx.saved(2) : Tensor();
  const Tensor rstd = ctx.saved(centred ? 3 : 2);
  const Device device = x.device();
  Tensor dx, dweight, dbias, partial, residual;
  const bool fused = want_dx && grad_residual.defined() && grad_residual.dtype() == x.dtype();
  if (fused) {
    residual =
        grad_residual.is_contiguous() ? std::move(grad_residual) : grad_residual.contiguous();
    grad_residual = Tensor();
    // In place when nothing else holds the gradient (as the engine's own accumulation).
    if (residual.storage().use_count() == 1) dx = residual;
  }
  if (want_dx && !dx.defined()) dx = Tensor::empty(x.shape(), x.dtype(), device);
  if (w.defined() && want_dweight) dweight = Tensor::empty({dims.dim}, DType::f32, device);
  if (has_bias && want_dbias) dbias = Tensor::empty({dims.dim}, DType::f32, device);
  if (dweight.defined() || dbias.defined()) {
    partial = Tensor::empty({norm_backward_blocks(dims.rows), 2, dims.dim}, DType::f32, device);
  }
  if (centred) {
    need_kernel(op, device, &NormKernels::layer_norm_backward)(g, x, w, mean, rstd, residual, dx,
                                                               dweight, dbias, partial);
  } else {
    need_kernel(op, device, &NormKernels::rms_norm_backward)(g, x, w, weight_offset, rstd, residual,
                                                             dx, dweight, partial);
  }
  // A residual gradient of another dtype than x's (none of the recipes makes one) is added as
  // the engine would have added it, in the wider dtype.
  if (want_dx && !fused && grad_residual.defined()) dx = add(grad_residual, dx);
  return {dx, dweight, dbias};
}

std::vector<Tensor> norm_backward(BackwardContext& ctx, bool centred, const NormDims& dims,
                                  bool has_bias, float weight_offset) {
  NormGrads grads =
      norm_grads(ctx, centred, dims, has_bias, weight_offset, ctx.grad_output(), Tensor(),
                 ctx.needs_input_grad(0), ctx.needs_input_grad(1), ctx.needs_input_grad(2));
  if (centred) return {grads.dx, grads.dweight, grads.dbias};
  return {grads.dx, grads.dweight};
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

// The norm of Note [Residual norms]: centred (layer_norm, with bias) or not (rms_norm).
struct NormSpec {
  const char* op;
  bool centred;
  const Tensor& weight;
  const Tensor& bias;
  double eps;
  std::optional<DType> out_dtype;
  float weight_offset;
};

Tensor unfused_norm(const NormSpec& n, const Tensor& x) {
  return n.centred ? layer_norm(x, n.weight, n.bias, n.eps, n.out_dtype)
                   : rms_norm(x, n.weight, n.eps, n.out_dtype, n.weight_offset);
}

// True when autocast would recast the norm's input or parameters to f32 (its policy for norms):
// the two ops then run, each as autocast has it.
bool autocast_recasts(const NormSpec& n, Device device, DType sum_dtype) {
  if (!AutocastMode::any_enabled() || !AutocastMode::get(device.type).enabled) return false;
  for (const Tensor* t : {&n.weight, &n.bias}) {
    if (t->defined() && t->dtype() != DType::f32) return true;
  }
  return sum_dtype != DType::f32;
}

ResidualNorm residual_norm(const NormSpec& n, const Tensor& residual, const Tensor& branch,
                           const BranchDropout& dropout) {
  check_floating(n.op, "residual", residual);
  if (branch.defined()) {
    check_floating(n.op, "branch", branch);
    check_same_device(n.op, {residual, branch});
    if (branch.shape() != residual.shape()) {
      throw ValueError(str_cat(n.op, ": branch ", branch.shape(), " must have residual's shape ",
                               residual.shape()));
    }
  }
  // add's promotion (ops/elementwise.cpp): equal dtypes stay, mixed ones sum in f32.
  const DType sum_dtype =
      !branch.defined() || branch.dtype() == residual.dtype() ? residual.dtype() : DType::f32;
  const bool fits_kernel =
      !branch.defined() || (residual.dtype() == sum_dtype &&
                            (branch.dtype() == sum_dtype ||
                             (sum_dtype == DType::f32 &&
                              (branch.dtype() == DType::bf16 || branch.dtype() == DType::f16))));
  if (!fits_kernel || autocast_recasts(n, residual.device(), sum_dtype)) {
    const Tensor sum = branch.defined() ? dropout_add(residual, branch, dropout.p, dropout.training,
                                                      dropout.generator)
                                        : residual;
    return {sum, unfused_norm(n, sum)};
  }
  if (branch.defined() && dropout.active()) {
    // The add with its draws is dropout_add's; the node that takes both gradients is the norm's.
    const Tensor sum =
        dropout_add(residual, branch, dropout.p, dropout.training, dropout.generator);
    return residual_norm(n, sum, Tensor(), {});
  }
  const DType out_dtype = n.out_dtype.value_or(sum_dtype);
  if (!is_floating(out_dtype)) {
    throw ValueError(str_cat(n.op, ": out_dtype ", dtype_name(out_dtype), " is not a float dtype"));
  }
  const NormDims dims = norm_dims(n.op, residual, n.weight, n.bias);
  const Device device = residual.device();
  const Tensor w = n.weight.defined() ? n.weight.contiguous() : Tensor();
  Tensor b;
  if (n.bias.defined())
    b = n.weight.defined() ? contiguous_as(n.bias, n.weight.dtype()) : n.bias.contiguous();
  Tensor out = Tensor::empty(residual.shape(), out_dtype, device);
  Tensor mean = n.centred ? Tensor::empty({dims.rows}, DType::f32, device) : Tensor();
  Tensor rstd = Tensor::empty({dims.rows}, DType::f32, device);
  const float eps = static_cast<float>(n.eps);
  Tensor sum;
  if (branch.defined()) {
    sum = Tensor::empty(residual.shape(), sum_dtype, device);
    const Tensor r = residual.contiguous(), x = branch.contiguous();
    if (n.centred) {
      need_kernel(n.op, device, &NormKernels::add_layer_norm_forward)(r, x, w, b, eps, sum, out,
                                                                      mean, rstd);
    } else {
      need_kernel(n.op, device, &NormKernels::add_rms_norm_forward)(r, x, w, eps, n.weight_offset,
                                                                    sum, out, rstd);
    }
  } else {
    sum = residual;
    const Tensor xc = residual.contiguous();
    if (n.centred) {
      need_kernel(n.op, device, &NormKernels::layer_norm_forward)(xc, w, b, eps, out, mean, rstd);
    } else {
      need_kernel(n.op, device, &NormKernels::rms_norm_forward)(xc, w, eps, n.weight_offset, out,
                                                                rstd);
    }
  }
  std::vector<Tensor> inputs{residual};
  if (branch.defined()) inputs.push_back(branch);
  inputs.push_back(n.weight);
  if (n.centred) inputs.push_back(n.bias);
  const char* name = n.centred ? "AddLayerNormBackward0" : "AddRmsNormBackward0";
  auto node = make_function_node(name, inputs);
  if (!node) return {sum, out};
  // The node's own handle of the residual (an alias of its storage) when there is no add.
  if (!branch.defined()) sum = residual.detach();
  node->save(sum);
  node->save(n.weight);
  if (n.centred) node->save(mean);
  node->save(rstd);
  const bool centred = n.centred, has_bias = n.bias.defined(), has_branch = branch.defined();
  const float weight_offset = n.weight_offset;
  node->set_backward([centred, dims, has_bias, has_branch, weight_offset](BackwardContext& ctx) {
    const size_t w = has_branch ? 2 : 1;  // the weight's input index
    const bool want_dsum = ctx.needs_input_grad(0) || (has_branch && ctx.needs_input_grad(1));
    NormGrads grads = norm_grads(ctx, centred, dims, has_bias, weight_offset, ctx.grad_output(1),
                                 ctx.take_grad_output(0), want_dsum, ctx.needs_input_grad(w),
                                 ctx.needs_input_grad(w + 1));
    // add's backward hands dsum to both sides (the engine casts a side of another dtype).
    std::vector<Tensor> result{ctx.needs_input_grad(0) ? grads.dx : Tensor()};
    if (has_branch) result.push_back(ctx.needs_input_grad(1) ? grads.dx : Tensor());
    result.push_back(grads.dweight);
    if (centred) result.push_back(grads.dbias);
    return result;
  });
  if (sum_dtype == DType::f32 && (out_dtype == DType::bf16 || out_dtype == DType::f16)) {
    node->accept_grad_in(DType::f32);
  }
  node->set_outputs({sum, out});
  return {sum, out};
}

}  // namespace

ResidualNorm add_layer_norm(const Tensor& residual, const Tensor& branch, const Tensor& weight,
                            const Tensor& bias, double eps, std::optional<DType> out_dtype,
                            BranchDropout dropout) {
  RecordFunction record("add_layer_norm", residual, branch, weight, bias);
  return residual_norm({"add_layer_norm", true, weight, bias, eps, out_dtype, 0.0f}, residual,
                       branch, dropout);
}

ResidualNorm add_rms_norm(const Tensor& residual, const Tensor& branch, const Tensor& weight,
                          double eps, std::optional<DType> out_dtype, double weight_offset,
                          BranchDropout dropout) {
  RecordFunction record("add_rms_norm", residual, branch, weight);
  return residual_norm(
      {"add_rms_norm", false, weight, Tensor(), eps, out_dtype, static_cast<float>(weight_offset)},
      residual, branch, dropout);
}

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
