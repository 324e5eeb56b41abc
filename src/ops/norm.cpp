// layer_norm and rms_norm. Backward keeps the input itself (no copy), the weight, and per row the
// fp32 statistics (mean and rstd for LayerNorm, rstd for RMSNorm: 4 or 8 bytes a row); x-hat is
// recomputed from them, which costs less than storing a second activation.
#include "ops/norm.h"

#include "autograd/function_node.h"
#include "backend/cpu/norm.h"
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

Tensor f32_or_undefined(const Tensor& t) { return t.defined() ? f32_contiguous(t) : Tensor(); }

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* mutable_data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// The row blocks of the native backward's partial sums on the device the op runs on or, on the
// meta device, plans for. A build without that backend plans with the CPU's blocks.
int64_t native_backward_blocks(const OpRoute& route, int64_t rows) {
  if (route.kernels) return route.need(&NormKernels::backward_blocks)(rows);
  const NormKernels* planned = find_kernels<NormKernels>(meta_allocates_like());
  if (planned && planned->backward_blocks) return planned->backward_blocks(rows);
  return cpu::norm_backward_blocks(rows);
}

// The native backward (Note [Native allocation pattern]): dx in x's dtype, dweight / dbias in
// f32 from per-block partial sums, no fp32 copies of x or of the incoming gradient.
std::vector<Tensor> native_norm_backward(const OpRoute& route, BackwardContext& ctx, bool centred,
                                         const NormDims& dims, bool has_bias) {
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
    partial = Tensor::empty({native_backward_blocks(route, dims.rows), 2, dims.dim}, DType::f32,
                            device);
  }
  if (route.kernels) {
    if (centred) {
      route.need(&NormKernels::layer_norm_backward)(g, x, w, mean, rstd, dx, dweight, dbias,
                                                    partial);
    } else {
      route.need(&NormKernels::rms_norm_backward)(g, x, w, rstd, dx, dweight, partial);
    }
  }
  if (centred) return {dx, dweight, dbias};
  return {dx, dweight};
}

// Gradients of layer_norm (centred) or rms_norm from the saved x, weight and statistics.
std::vector<Tensor> norm_backward(BackwardContext& ctx, bool centred, const NormDims& dims,
                                  bool has_bias) {
  const char* op = centred ? "layer_norm backward" : "rms_norm backward";
  const OpRoute route = op_route(op, ctx.grad_output().device());
  if (route.native) return native_norm_backward(route, ctx, centred, dims, has_bias);
  const Tensor g = f32_contiguous(ctx.grad_output());
  const Tensor x = f32_contiguous(ctx.saved(0));
  const Tensor w = f32_or_undefined(ctx.saved(1));
  const Tensor mean = centred ? ctx.saved(2) : Tensor();
  const Tensor rstd = ctx.saved(centred ? 3 : 2);
  const Device device = g.device();
  Tensor dx, dweight, dbias, partial;
  if (ctx.needs_input_grad(0)) dx = Tensor::empty(x.shape(), DType::f32, device);
  if (w.defined() && ctx.needs_input_grad(1))
    dweight = Tensor::empty({dims.dim}, DType::f32, device);
  if (has_bias && ctx.needs_input_grad(2)) dbias = Tensor::empty({dims.dim}, DType::f32, device);
  if (dweight.defined() || dbias.defined()) {
    partial =
        Tensor::empty({cpu::norm_backward_blocks(dims.rows), 2, dims.dim}, DType::f32, device);
  }
  if (route.cpu) {
    if (centred) {
      cpu::layer_norm_backward(g.data<float>(), x.data<float>(), data_or_null(w),
                               mean.data<float>(), rstd.data<float>(), dims.rows, dims.dim,
                               mutable_data_or_null(dx), mutable_data_or_null(dweight),
                               mutable_data_or_null(dbias), mutable_data_or_null(partial));
    } else {
      cpu::rms_norm_backward(g.data<float>(), x.data<float>(), data_or_null(w), rstd.data<float>(),
                             dims.rows, dims.dim, mutable_data_or_null(dx),
                             mutable_data_or_null(dweight), mutable_data_or_null(partial));
    }
  }
  if (centred) return {dx, dweight, dbias};
  return {dx, dweight};
}

// The native forward: out in x's dtype, f32 statistics, x and weight read as they are (bias in
// the weight's dtype, as the kernels take it). Saves what the CPU path saves.
Tensor native_norm(const OpRoute& route, bool centred, const Tensor& x, const Tensor& weight,
                   const Tensor& bias, double eps, const NormDims& dims) {
  const Device device = x.device();
  const Tensor xc = x.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor b;
  if (bias.defined()) b = weight.defined() ? contiguous_as(bias, weight.dtype()) : bias.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), device);
  Tensor mean = centred ? Tensor::empty({dims.rows}, DType::f32, device) : Tensor();
  Tensor rstd = Tensor::empty({dims.rows}, DType::f32, device);
  if (route.kernels) {
    if (centred) {
      route.need(&NormKernels::layer_norm_forward)(xc, w, b, static_cast<float>(eps), out, mean,
                                                   rstd);
    } else {
      route.need(&NormKernels::rms_norm_forward)(xc, w, static_cast<float>(eps), out, rstd);
    }
  }
  const char* name = centred ? "LayerNormBackward0" : "RmsNormBackward0";
  if (auto node = make_function_node(name, centred ? std::vector<Tensor>{x, weight, bias}
                                                   : std::vector<Tensor>{x, weight})) {
    node->save(x);
    node->save(weight);
    if (centred) node->save(mean);
    node->save(rstd);
    const bool has_bias = bias.defined();
    node->set_backward([centred, dims, has_bias](BackwardContext& ctx) {
      return norm_backward(ctx, centred, dims, has_bias);
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  RecordFunction record("layer_norm", x, weight, bias);
  if (auto cast = autocast_inputs("layer_norm", {x, weight, bias})) {
    return layer_norm((*cast)[0], (*cast)[1], (*cast)[2], eps);
  }
  const NormDims dims = norm_dims("layer_norm", x, weight, bias);
  const OpRoute route = op_route("layer_norm", x.device());
  if (route.native) return native_norm(route, true, x, weight, bias, eps, dims);
  const Device device = x.device();
  const Tensor xf = f32_contiguous(x);
  const Tensor wf = f32_or_undefined(weight);
  const Tensor bf = f32_or_undefined(bias);
  Tensor out = Tensor::empty(x.shape(), DType::f32, device);
  Tensor mean = Tensor::empty({dims.rows}, DType::f32, device);
  Tensor rstd = Tensor::empty({dims.rows}, DType::f32, device);
  if (route.cpu) {
    cpu::layer_norm_forward(xf.data<float>(), data_or_null(wf), data_or_null(bf), dims.rows,
                            dims.dim, static_cast<float>(eps), out.data<float>(),
                            mean.data<float>(), rstd.data<float>());
  }
  out = to_dtype(out, x.dtype());
  if (auto node = make_function_node("LayerNormBackward0", {x, weight, bias})) {
    node->save(x);
    node->save(weight);
    node->save(mean);
    node->save(rstd);
    const bool has_bias = bias.defined();
    node->set_backward([dims, has_bias](BackwardContext& ctx) {
      return norm_backward(ctx, true, dims, has_bias);
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  RecordFunction record("rms_norm", x, weight);
  if (auto cast = autocast_inputs("rms_norm", {x, weight})) return rms_norm((*cast)[0], (*cast)[1], eps);
  const NormDims dims = norm_dims("rms_norm", x, weight, Tensor());
  const OpRoute route = op_route("rms_norm", x.device());
  if (route.native) return native_norm(route, false, x, weight, Tensor(), eps, dims);
  const Device device = x.device();
  const Tensor xf = f32_contiguous(x);
  const Tensor wf = f32_or_undefined(weight);
  Tensor out = Tensor::empty(x.shape(), DType::f32, device);
  Tensor rstd = Tensor::empty({dims.rows}, DType::f32, device);
  if (route.cpu) {
    cpu::rms_norm_forward(xf.data<float>(), data_or_null(wf), dims.rows, dims.dim,
                          static_cast<float>(eps), out.data<float>(), rstd.data<float>());
  }
  out = to_dtype(out, x.dtype());
  if (auto node = make_function_node("RmsNormBackward0", {x, weight})) {
    node->save(x);
    node->save(weight);
    node->save(rstd);
    node->set_backward(
        [dims](BackwardContext& ctx) { return norm_backward(ctx, false, dims, false); });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom
