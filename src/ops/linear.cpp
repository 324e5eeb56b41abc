// matmul and linear on the device's gemm entry (backend/gemm_kernels.h: oneDNN on the CPU,
// cuBLASLt on CUDA) in the tensors' own dtypes, one code path on every device. Gradients of weights
// are computed as one GEMM over all leading dimensions of x (the tokens of a batch), never per
// sample.
#include "ops/linear.h"

#include "autograd/function_node.h"
#include "backend/gemm_kernels.h"
#include "backend/reduction_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/elementwise.h"
#include "ops/op_support.h"
#include "ops/reduction.h"

namespace headroom {

namespace {

struct LinearDims {
  int64_t in;
  int64_t out;
};

LinearDims linear_dims(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       WeightLayout layout) {
  check_floating("linear", "x", x);
  check_floating("linear", "weight", weight);
  check_same_device("linear", {x, weight, bias});
  if (x.ndim() < 1 || weight.ndim() != 2) {
    throw ValueError(str_cat("linear: x ", x.shape(), " must be at least 1-D and weight ",
                             weight.shape(), " 2-D"));
  }
  const int64_t in = x.size(-1);
  const int64_t w_in = layout == WeightLayout::out_in ? weight.size(1) : weight.size(0);
  const int64_t out = layout == WeightLayout::out_in ? weight.size(0) : weight.size(1);
  if (w_in != in) {
    throw ValueError(str_cat("linear: x has ", in, " features but weight ", weight.shape(),
                             layout == WeightLayout::out_in ? " ([out, in])" : " ([in, out])",
                             " expects ", w_in));
  }
  if (bias.defined() && (bias.ndim() != 1 || bias.size(0) != out)) {
    throw ValueError(str_cat("linear: bias ", bias.shape(), " must be [", out, "]"));
  }
  return {in, out};
}

// Every product is one GEMM on the device's table (backend/gemm_kernels.h) with its operands in
// their own dtype; only the results are allocated (and an operand copy where its layout or dtype
// is not one the entry reads), the same bytes on every device.

// The dtype two operands are multiplied in: theirs, or f32 when they differ.
DType operand_dtype(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() ? a.dtype() : DType::f32;
}

// The dtype a GEMM on `operands` writes for a result wanted in `wanted`: the entry writes f32 or
// the operands' dtype, so anything else is computed in f32 and rounded once afterwards.
DType result_dtype(DType operands, DType wanted) {
  return wanted == operands || wanted == DType::f32 ? wanted : DType::f32;
}

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }

// The product of x's leading dimensions: the rows of a linear, also when x has no features.
int64_t leading_numel(const Tensor& x) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.ndim(); ++d) rows *= x.size(d);
  return rows;
}

// An operand as the gemm entry reads it (unit stride in its last dimension, rows apart by at
// least a row): the tensor itself, its transpose with the flag flipped when it is a transposed
// view (k.transpose(-1, -2)), else a contiguous copy.
struct GemmOperand {
  Tensor t;
  bool trans;
};

GemmOperand gemm_operand(const Tensor& x, bool trans) {
  const int64_t rows = x.size(-2), cols = x.size(-1);
  auto packed = [](int64_t size, int64_t stride) { return size <= 1 || stride == 1; };
  auto apart = [](int64_t size, int64_t stride, int64_t inner) {
    return size <= 1 || stride >= std::max<int64_t>(inner, 1);
  };
  if (packed(cols, x.stride(-1)) && apart(rows, x.stride(-2), cols)) return {x, trans};
  if (packed(rows, x.stride(-2)) && apart(cols, x.stride(-1), rows)) {
    return {x.transpose(-1, -2), !trans};
  }
  return {x.contiguous(), trans};
}

// c (fresh, contiguous) = alpha * op(a) @ op(b), with the epilogue: + bias[col], or the bias
// gradient written to `bias` (backend/gemm_kernels.h); a, b and c 2-D or [batch, R, C] with a
// batch of 1 broadcast. accumulate: c += alpha * op(a) @ op(b) instead (c holds values).
void run_gemm(const char* op, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
              const Tensor& c, GemmEpilogue epilogue = GemmEpilogue::none,
              const Tensor& bias = Tensor(), float alpha = 1.0f, bool accumulate = false) {
  const GemmOperand oa = gemm_operand(a, trans_a);
  const GemmOperand ob = gemm_operand(b, trans_b);
  if (c.numel() == 0 && !is_bias_grad(epilogue)) return;
  if ((trans_a ? a.size(-2) : a.size(-1)) == 0) {
    // An empty inner dimension: the entry takes none, and the product (and a sum over it) is zero.
    if (accumulate) return;
    if (epilogue == GemmEpilogue::bias) {
      c.copy_(bias.expand(c.shape()));
    } else {
      c.zero_();
      if (is_bias_grad(epilogue)) bias.zero_();
    }
    return;
  }
  if (c.numel() == 0) return;
  need_kernel(op, c.device(), &GemmKernels::gemm)(oa.trans, ob.trans, oa.t, ob.t, alpha,
                                                  accumulate ? 1.0f : 0.0f, c, epilogue, bias);
}

// The batched product of a [batch..., R, C] (or its transpose) and b, expanded to the batch, into
// a new `out_shape` ([batch..., M, N]) in `dtype`: a and b viewed as [batch, R, C], a copy only
// where their batch dimensions do not collapse into one stride.
Tensor batched_product(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                       const Shape& batch_shape, DType dtype) {
  const int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const int64_t n = trans_b ? b.size(-2) : b.size(-1);
  std::vector<int64_t> out_dims = batch_shape.to_vector();
  out_dims.push_back(m);
  out_dims.push_back(n);
  const int64_t batch = batch_shape.numel();
  const DType operands = operand_dtype(a, b);
  Tensor out = Tensor::empty(Shape(out_dims), result_dtype(operands, dtype), a.device());
  const Tensor a3 = as_dtype(a, operands).reshape({batch, a.size(-2), a.size(-1)});
  const Tensor b3 = as_dtype(b, operands).reshape({batch, b.size(-2), b.size(-1)});
  run_gemm("matmul", a3, trans_a, b3, trans_b, out.view({batch, m, n}));
  return as_dtype(out, dtype);
}

// linear's forward: one GEMM with the bias epilogue, out in x's dtype.
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      WeightLayout layout, const LinearDims& dims) {
  const int64_t rows = leading_numel(x);
  std::vector<int64_t> out_dims = x.shape().to_vector();
  out_dims.back() = dims.out;
  const DType operands = operand_dtype(x, weight);
  const DType result = result_dtype(operands, x.dtype());
  Tensor out = Tensor::empty(Shape(out_dims), result, x.device());
  const Tensor x2 = as_dtype(x, operands).reshape({rows, dims.in});
  // The bias is read in the output's dtype, as cuBLASLt's bias epilogue reads it.
  const Tensor b = bias.defined() ? as_dtype(bias, result).contiguous() : Tensor();
  run_gemm("linear", x2, false, as_dtype(weight, operands), layout == WeightLayout::out_in,
           out.view({rows, dims.out}), b.defined() ? GemmEpilogue::bias : GemmEpilogue::none, b);
  return as_dtype(out, x.dtype());
}

// What a linear's backward knows of its forward. x is saved only for dW and the weight only for
// dx (slot -1: not saved), so a frozen weight (LoRA's base) keeps no activation alive for a
// gradient nobody wants, as torch's addmm saves self only when mat2 requires grad.
struct LinearSaved {
  int x_slot = -1;
  int w_slot = -1;
  int64_t rows = 0;  // product of x's leading dimensions
  Shape x_shape, w_shape;
  bool has_bias = false;
};

// dx = alpha g @ op(w) [rows, in] for input `input` of the node, in its gradient dtype (its own,
// or f32 for an autocast copy), added by the GEMM into the sum of x's other gradients when the
// engine holds one (Note [Partial gradients] in autograd/node.h). trans_w: w is [out, in].
Tensor input_gradient(const char* op, BackwardContext& ctx, size_t input, const Tensor& g,
                      const Tensor& w, bool trans_w, float alpha, const LinearSaved& saved,
                      int64_t in) {
  const DType operands = operand_dtype(g, w);
  const DType wanted = ctx.grad_dtype(input);
  const DType result = result_dtype(operands, wanted);
  const Tensor partial =
      result == wanted ? ctx.take_partial_gradient(input, wanted, saved.x_shape) : Tensor();
  Tensor gx = partial.defined() ? partial.view({saved.rows, in})
                                : Tensor::empty({saved.rows, in}, result, g.device());
  run_gemm(op, as_dtype(g, operands), false, as_dtype(w, operands), !trans_w, gx,
           GemmEpilogue::none, Tensor(), alpha, partial.defined());
  return as_dtype(gx, wanted).view(saved.x_shape);
}

// The gradients of a linear, each in its input's gradient dtype (its own, or fp32 for an
// autocast copy of an fp32 tensor: BackwardContext::grad_dtype): dx = g @ W and dW = g^T @ x (or
// x^T @ g for [in, out]) as one GEMM each over all rows, db the column sums of g, as PyTorch's
// grad.sum(0): in dW's GEMM (the bias-gradient epilogue; on the CPU the reduction table's
// sum_middle, summed in fp64 and rounded once), or by sum_middle itself when no dW is wanted.
std::vector<Tensor> linear_backward(BackwardContext& ctx, WeightLayout layout,
                                    const LinearDims& dims, const LinearSaved& saved) {
  const char* op = "linear backward";
  const bool out_in = layout == WeightLayout::out_in;
  const int64_t rows = saved.rows, in = dims.in, out = dims.out;
  const Device device = ctx.grad_output().device();
  const Tensor g = ctx.grad_output().contiguous().view({rows, out});
  Tensor gx, gw, gb;
  if (ctx.needs_input_grad(0)) {
    gx = input_gradient(op, ctx, 0, g, ctx.saved(static_cast<size_t>(saved.w_slot)), out_in, 1.0f,
                        saved, in);
  }
  const bool wants_db = saved.has_bias && ctx.needs_input_grad(2);
  if (ctx.needs_input_grad(1)) {
    const Tensor x = ctx.saved(static_cast<size_t>(saved.x_slot));
    const DType operands = operand_dtype(g, x);
    const Tensor g_op = as_dtype(g, operands);
    const Tensor x2 = as_dtype(x, operands).reshape({rows, in});
    const DType wanted = ctx.grad_dtype(1);
    gw = Tensor::empty(saved.w_shape, result_dtype(operands, wanted), device);
    // db, the column sums of g, comes out of dW's GEMM (its bias-gradient epilogue: g is op(a)
    // for [out, in] weights, op(b) for [in, out]) when the entry can write its dtype.
    GemmEpilogue epilogue = GemmEpilogue::none;
    const DType db_dtype = wants_db ? result_dtype(g.dtype(), ctx.grad_dtype(2)) : DType::f32;
    if (wants_db && (db_dtype == DType::f32 || db_dtype == gw.dtype())) {
      gb = Tensor::empty({out}, db_dtype, device);
      epilogue = out_in ? GemmEpilogue::bias_grad_a : GemmEpilogue::bias_grad_b;
    }
    if (out_in) {
      run_gemm(op, g_op, true, x2, false, gw, epilogue, gb);
    } else {
      run_gemm(op, x2, true, g_op, false, gw, epilogue, gb);
    }
    gw = as_dtype(gw, wanted);
    if (gb.defined()) gb = as_dtype(gb, ctx.grad_dtype(2));
  }
  if (wants_db && !gb.defined()) {
    const DType wanted = ctx.grad_dtype(2);
    gb = Tensor::empty({out}, result_dtype(g.dtype(), wanted), device);
    need_kernel(op, device, &ReductionKernels::sum_middle)(g, 1, rows, out, 1.0, gb);
    gb = as_dtype(gb, wanted);
  }
  return {gx, gw, gb};
}

// Expands x [..., R, C] to batch_shape + [R, C].
Tensor expand_batch(const Tensor& x, const Shape& batch_shape) {
  std::vector<int64_t> dims = batch_shape.to_vector();
  dims.push_back(x.size(-2));
  dims.push_back(x.size(-1));
  const Shape shape(dims);
  return x.shape() == shape ? x : x.expand(shape);
}

Shape batch_of(const Tensor& x) {
  std::vector<int64_t> dims = x.shape().to_vector();
  dims.resize(dims.size() - 2);
  return Shape(dims);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  RecordFunction record("matmul", a, b);
  if (auto cast = autocast_inputs("matmul", {a, b})) return matmul((*cast)[0], (*cast)[1]);
  check_floating("matmul", "a", a);
  check_floating("matmul", "b", b);
  check_same_device("matmul", {a, b});
  if (a.ndim() < 2 || b.ndim() < 2) {
    throw ValueError(
        str_cat("matmul: both operands must be at least 2-D, got ", a.shape(), " and ", b.shape()));
  }
  if (a.size(-1) != b.size(-2)) {
    throw ValueError(str_cat("matmul: ", a.shape(), " @ ", b.shape(), ": inner sizes ", a.size(-1),
                             " and ", b.size(-2), " differ"));
  }
  const Shape batch = broadcast_shapes(batch_of(a), batch_of(b));
  Tensor out = batched_product(expand_batch(a, batch), false, expand_batch(b, batch), false, batch,
                               a.dtype() == b.dtype() ? a.dtype() : DType::f32);
  if (auto node = make_function_node("MatmulBackward0", {a, b})) {
    node->save(a);
    node->save(b);
    const Shape a_shape = a.shape(), b_shape = b.shape();
    node->set_backward([batch, a_shape, b_shape](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& g = ctx.grad_output();
      const Tensor sa = expand_batch(ctx.saved(0), batch);
      const Tensor sb = expand_batch(ctx.saved(1), batch);
      Tensor ga, gb;
      if (ctx.needs_input_grad(0)) {
        ga = sum_to_shape(batched_product(g, false, sb, true, batch, sa.dtype()), a_shape);
      }
      if (ctx.needs_input_grad(1) && batch.numel() > 1 &&
          b_shape.numel() == sb.size(-2) * sb.size(-1)) {
        // b is one matrix for the whole batch (a weight): sa^T @ g over all batch rows stacked,
        // one GEMM instead of a product per batch summed afterwards.
        const int64_t rows = batch.numel() * sa.size(-2);
        gb = batched_product(sa.reshape({rows, sa.size(-1)}), true, g.reshape({rows, g.size(-1)}),
                             false, Shape{}, sb.dtype())
                 .reshape(b_shape);
      } else if (ctx.needs_input_grad(1)) {
        gb = sum_to_shape(batched_product(sa, true, g, false, batch, sb.dtype()), b_shape);
      }
      return {ga, gb};
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, WeightLayout layout) {
  RecordFunction record("linear", x, weight, bias);
  if (auto cast = autocast_inputs("linear", {x, weight, bias})) {
    return linear((*cast)[0], (*cast)[1], (*cast)[2], layout);
  }
  const LinearDims dims = linear_dims(x, weight, bias, layout);
  // The node saves its inputs before the GEMM runs: a recompute under selective checkpointing
  // stops right after these saves and never repeats the GEMM (Note [Selective checkpointing]).
  auto node = make_function_node("LinearBackward0", {x, weight, bias});
  LinearSaved saved;
  if (node) {
    if (node->needs_input_grad(1)) saved.x_slot = static_cast<int>(node->save(x));
    if (node->needs_input_grad(0)) saved.w_slot = static_cast<int>(node->save(weight));
  }
  Tensor out = linear_forward(x, weight, bias, layout, dims);
  if (node) {
    saved.rows = leading_numel(x);
    saved.x_shape = x.shape();
    saved.w_shape = weight.shape();
    saved.has_bias = bias.defined();
    node->set_backward([dims, layout, saved](BackwardContext& ctx) -> std::vector<Tensor> {
      return linear_backward(ctx, layout, dims, saved);
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor linear_add(Tensor base, const Tensor& x, const Tensor& weight, double alpha) {
  RecordFunction record("linear_add", base, x, weight);
  if (auto cast = autocast_inputs("linear", {x, weight})) {
    return linear_add(std::move(base), (*cast)[0], (*cast)[1], alpha);
  }
  const char* op = "linear_add";
  const LinearDims dims = linear_dims(x, weight, Tensor(), WeightLayout::out_in);
  check_floating(op, "base", base);
  check_same_device(op, {base, x});
  std::vector<int64_t> out_dims = x.shape().to_vector();
  out_dims.back() = dims.out;
  if (base.shape() != Shape(out_dims)) {
    throw ValueError(str_cat(op, ": base ", base.shape(), " must be ", Shape(out_dims), ", x ",
                             x.shape(), " through weight ", weight.shape()));
  }
  const DType operands = operand_dtype(x, weight);
  // The GEMM accumulates into a c of the operands' dtype or f32 (backend/gemm_kernels.h); any
  // other base takes the two ops, as does an alpha that is not a float.
  if ((base.dtype() != operands && base.dtype() != DType::f32) ||
      static_cast<double>(static_cast<float>(alpha)) != alpha) {
    const Tensor delta = linear(x, weight);
    return add(base, alpha == 1.0 ? delta : scale(delta, alpha));
  }
  // base's buffer is the result when nothing else holds it (the base layer's fresh output, moved
  // in): the GEMM adds into it, with no buffer and no pass of its own.
  const bool in_place = base.is_contiguous() && base.storage().use_count() == 1;
  auto node = make_function_node("LinearAddBackward0", {base, x, weight});
  LinearSaved saved;
  if (node) {
    if (node->needs_input_grad(2)) saved.x_slot = static_cast<int>(node->save(x));
    if (node->needs_input_grad(1)) saved.w_slot = static_cast<int>(node->save(weight));
  }
  Tensor out = in_place ? base.detach() : base.contiguous().clone();
  base = Tensor();
  const int64_t rows = leading_numel(x);
  run_gemm(op, as_dtype(x, operands).reshape({rows, dims.in}), false, as_dtype(weight, operands),
           true, out.view({rows, dims.out}), GemmEpilogue::none, Tensor(),
           static_cast<float>(alpha), true);
  if (node) {
    saved.rows = rows;
    saved.x_shape = x.shape();
    saved.w_shape = weight.shape();
    const float a = static_cast<float>(alpha);
    // d base = g; dx = alpha g W and dW = alpha g^T x, alpha in the GEMMs (no scaled copy of g).
    node->set_backward([dims, saved, a](BackwardContext& ctx) -> std::vector<Tensor> {
      const Device device = ctx.grad_output().device();
      const Tensor g = ctx.grad_output().contiguous().view({saved.rows, dims.out});
      Tensor gx, gw;
      if (ctx.needs_input_grad(1)) {
        gx = input_gradient("linear_add backward", ctx, 1, g,
                            ctx.saved(static_cast<size_t>(saved.w_slot)), true, a, saved, dims.in);
      }
      if (ctx.needs_input_grad(2)) {
        const Tensor x = ctx.saved(static_cast<size_t>(saved.x_slot));
        const DType operands = operand_dtype(g, x);
        const DType wanted = ctx.grad_dtype(2);
        gw = Tensor::empty(saved.w_shape, result_dtype(operands, wanted), device);
        run_gemm("linear_add backward", as_dtype(g, operands), true,
                 as_dtype(x, operands).reshape({saved.rows, dims.in}), false, gw,
                 GemmEpilogue::none, Tensor(), a);
        gw = as_dtype(gw, wanted);
      }
      return {ctx.needs_input_grad(0) ? ctx.grad_output() : Tensor(), gx, gw};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom
