// matmul and linear on cpu::gemm, or on a native device's gemm entry (cuBLASLt) in the tensors' own
// dtypes. Gradients of weights are computed as one GEMM over all leading dimensions of x (the
// tokens of a batch), never per sample.
#include "ops/linear.h"

#include "autograd/function_node.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/reduction.h"
#include "backend/gemm_kernels.h"
#include "backend/reduction_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/op_support.h"
#include "ops/reduction.h"

namespace headroom {

namespace {

struct LinearDims {
  int64_t rows;  // product of x's leading dimensions
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
  return {x.numel() / std::max<int64_t>(in, 1), in, out};
}

// ---- the native pattern (Note [Native allocation pattern]): operands in their own dtype, one
// GEMM per product, only the results allocated.

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

// c (fresh, contiguous) = op(a) @ op(b) (+ bias[col]); a, b and c 2-D or [batch, R, C] with a
// batch of 1 broadcast. The meta device allocates the same operand copies and computes nothing.
void native_gemm(const OpRoute& route, const Tensor& a, bool trans_a, const Tensor& b,
                 bool trans_b, const Tensor& c, const Tensor& bias = Tensor()) {
  const GemmOperand oa = gemm_operand(a, trans_a);
  const GemmOperand ob = gemm_operand(b, trans_b);
  if (!route.kernels || c.numel() == 0) return;
  if ((trans_a ? a.size(-2) : a.size(-1)) == 0) {
    // An empty inner dimension: the entry takes none, and the product is zero.
    if (bias.defined()) {
      c.copy_(bias.expand(c.shape()));
    } else {
      c.zero_();
    }
    return;
  }
  route.need(&GemmKernels::gemm)(oa.trans, ob.trans, oa.t, ob.t, 1.0f, 0.0f, c,
                                 bias.defined() ? GemmEpilogue::bias : GemmEpilogue::none, bias);
}

// batched_product on the native route, into a new `out_shape` ([batch..., M, N]): a and b
// (expanded to the batch) viewed as [batch, R, C], a copy only where their batch dimensions do
// not collapse into one stride.
Tensor native_batched_product(const OpRoute& route, const Tensor& a, bool trans_a,
                              const Tensor& b, bool trans_b, const Shape& out_shape,
                              int64_t batch, DType dtype) {
  const DType operands = operand_dtype(a, b);
  Tensor out = Tensor::empty(out_shape, result_dtype(operands, dtype), a.device());
  const Tensor a3 = as_dtype(a, operands).reshape({batch, a.size(-2), a.size(-1)});
  const Tensor b3 = as_dtype(b, operands).reshape({batch, b.size(-2), b.size(-1)});
  native_gemm(route, a3, trans_a, b3, trans_b, out.view({batch, out.size(-2), out.size(-1)}));
  return to_dtype(out, dtype);
}

// linear on the native route: one GEMM with the bias epilogue, out in x's dtype.
Tensor native_linear_forward(const OpRoute& route, const Tensor& x, const Tensor& weight,
                             const Tensor& bias, WeightLayout layout, const LinearDims& dims) {
  const int64_t rows = leading_numel(x);
  std::vector<int64_t> out_dims = x.shape().to_vector();
  out_dims.back() = dims.out;
  const DType operands = operand_dtype(x, weight);
  const DType result = result_dtype(operands, x.dtype());
  Tensor out = Tensor::empty(Shape(out_dims), result, x.device());
  const Tensor x2 = as_dtype(x, operands).reshape({rows, dims.in});
  // cuBLASLt's bias epilogue reads the bias in the output's dtype.
  const Tensor b = bias.defined() ? as_dtype(bias, result).contiguous() : Tensor();
  native_gemm(route, x2, false, as_dtype(weight, operands), layout == WeightLayout::out_in,
              out.view({rows, dims.out}), b);
  return to_dtype(out, x.dtype());
}

// What a linear's backward knows of its forward. x is saved only for dW and the weight only for
// dx (slot -1: not saved), so a frozen weight (LoRA's base) keeps no activation alive for a
// gradient nobody wants, as torch's addmm saves self only when mat2 requires grad.
struct LinearSaved {
  int x_slot = -1;
  int w_slot = -1;
  int64_t rows = 0;  // product of x's leading dimensions
  Shape x_shape, w_shape;
  DType x_dtype = DType::f32, w_dtype = DType::f32, bias_dtype = DType::f32;
  bool has_bias = false;
};

// The gradients of a native linear, each in its input's dtype: dx = g @ W and dW = g^T @ x (or
// x^T @ g for [in, out]) as one GEMM each over all rows, db the column sums of g.
std::vector<Tensor> native_linear_backward(const OpRoute& route, BackwardContext& ctx,
                                           WeightLayout layout, const LinearDims& dims,
                                           const LinearSaved& saved) {
  const bool out_in = layout == WeightLayout::out_in;
  const int64_t rows = saved.rows, in = dims.in, out = dims.out;
  const Device device = ctx.grad_output().device();
  const Tensor g = ctx.grad_output().contiguous().view({rows, out});
  Tensor gx, gw, gb;
  if (ctx.needs_input_grad(0)) {
    const Tensor w = ctx.saved(static_cast<size_t>(saved.w_slot));
    const DType operands = operand_dtype(g, w);
    gx = Tensor::empty({rows, in}, result_dtype(operands, saved.x_dtype), device);
    native_gemm(route, as_dtype(g, operands), false, as_dtype(w, operands), !out_in, gx);
    gx = to_dtype(gx, saved.x_dtype).view(saved.x_shape);
  }
  if (ctx.needs_input_grad(1)) {
    const Tensor x = ctx.saved(static_cast<size_t>(saved.x_slot));
    const DType operands = operand_dtype(g, x);
    const Tensor g_op = as_dtype(g, operands);
    const Tensor x2 = as_dtype(x, operands).reshape({rows, in});
    gw = Tensor::empty(saved.w_shape, result_dtype(operands, saved.w_dtype), device);
    if (out_in) {
      native_gemm(route, g_op, true, x2, false, gw);
    } else {
      native_gemm(route, x2, true, g_op, false, gw);
    }
    gw = to_dtype(gw, saved.w_dtype);
  }
  if (saved.has_bias && ctx.needs_input_grad(2)) {
    gb = Tensor::empty({out}, saved.bias_dtype, device);
    if (route.kernels && rows == 0) {
      gb.zero_();
    } else if (route.kernels) {
      route.need(&ReductionKernels::sum_middle)(g, 1, rows, out, 1.0, gb);
    }
  }
  return {gx, gw, gb};
}

// bf16 x, weight and bias run on cpu::gemm_bf16 and give bf16 directly, as a GPU's bf16 GEMM
// with a bias epilogue; every other dtype computes in fp32 and rounds the result once (for f16
// inputs that is a GPU's f16 GEMM: f16 operands, fp32 accumulation, one rounding).
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      WeightLayout layout, const LinearDims& dims) {
  std::vector<int64_t> out_dims = x.shape().to_vector();
  out_dims.back() = dims.out;
  const OpRoute route = op_route("linear", x.device());
  if (route.native) return native_linear_forward(route, x, weight, bias, layout, dims);
  const bool bf16 = all_bf16({x, weight, bias});
  const bool cpu = route.cpu;
  if (bf16) {
    Tensor out = Tensor::empty(Shape(out_dims), DType::bf16, x.device());
    const Tensor xb = x.contiguous();
    const Tensor wb = weight.contiguous();
    const Tensor bf = bias.defined() ? f32_contiguous(bias) : Tensor();
    if (cpu) {
      const bool out_in = layout == WeightLayout::out_in;
      cpu::gemm_bf16(false, out_in, dims.rows, dims.out, dims.in, 1.0f, xb.data<BFloat16>(),
                     dims.in, wb.data<BFloat16>(), out_in ? dims.in : dims.out, 0.0f,
                     out.data_ptr(), DType::bf16, dims.out, bf.defined() ? bf.data<float>() : nullptr);
    }
    return out;
  }
  Tensor out = Tensor::empty(Shape(out_dims), DType::f32, x.device());
  const Tensor xf = f32_contiguous(x);
  const Tensor wf = f32_contiguous(weight);
  const Tensor bf = bias.defined() ? f32_contiguous(bias) : Tensor();
  if (cpu) {
    float* c = out.data<float>();
    float beta = 0.0f;
    if (bf.defined()) {
      const float* b = bf.data<float>();
#pragma omp parallel for if (dims.rows * dims.out > (1 << 15))
      for (int64_t r = 0; r < dims.rows; ++r) {
        for (int64_t j = 0; j < dims.out; ++j) c[r * dims.out + j] = b[j];
      }
      beta = 1.0f;
    }
    if (layout == WeightLayout::out_in) {
      cpu::gemm(false, true, dims.rows, dims.out, dims.in, 1.0f, xf.data<float>(), dims.in,
                wf.data<float>(), dims.in, beta, c, dims.out);
    } else {
      cpu::gemm(false, false, dims.rows, dims.out, dims.in, 1.0f, xf.data<float>(), dims.in,
                wf.data<float>(), dims.out, beta, c, dims.out);
    }
  }
  return to_dtype(out, x.dtype());
}

// C = op(A) @ op(B) into c, whose dtype picks the kernel: bf16 (operands bf16) or f32 (operands
// f32). All contiguous, row-major.
void gemm_any(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a,
              int64_t lda, const Tensor& b, int64_t ldb, const Tensor& c, int64_t ldc) {
  if (c.dtype() == DType::bf16) {
    cpu::gemm_bf16(trans_a, trans_b, m, n, k, 1.0f, a.data<BFloat16>(), lda, b.data<BFloat16>(),
                   ldb, 0.0f, c.data_ptr(), DType::bf16, ldc);
  } else {
    cpu::gemm(trans_a, trans_b, m, n, k, 1.0f, a.data<float>(), lda, b.data<float>(), ldb, 0.0f,
              c.data<float>(), ldc);
  }
}

// The batched product of a [batch, M, K] (or its transpose) and b, contiguous, in `dtype`: bf16
// operands with a bf16 result run on cpu::gemm_bf16_batched; otherwise fp32, rounded once.
Tensor batched_product(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                       const Shape& batch_shape, DType dtype) {
  const int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const int64_t k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t n = trans_b ? b.size(-2) : b.size(-1);
  std::vector<int64_t> out_dims = batch_shape.to_vector();
  out_dims.push_back(m);
  out_dims.push_back(n);
  const int64_t batch = batch_shape.numel();
  const OpRoute route = op_route("matmul", a.device());
  if (route.native) {
    return native_batched_product(route, a, trans_a, b, trans_b, Shape(out_dims), batch, dtype);
  }
  const bool cpu = route.cpu;
  if (dtype == DType::bf16 && all_bf16({a, b})) {
    Tensor out = Tensor::empty(Shape(out_dims), DType::bf16, a.device());
    const Tensor ab = a.contiguous();
    const Tensor bb = b.contiguous();
    if (cpu) {
      cpu::gemm_bf16_batched(trans_a, trans_b, batch, m, n, k, 1.0f, ab.data<BFloat16>(),
                             a.size(-1), a.size(-1) * a.size(-2), bb.data<BFloat16>(), b.size(-1),
                             b.size(-1) * b.size(-2), 0.0f, out.data_ptr(), DType::bf16, n, m * n);
    }
    return out;
  }
  Tensor out = Tensor::empty(Shape(out_dims), DType::f32, a.device());
  const Tensor af = f32_contiguous(a);
  const Tensor bf = f32_contiguous(b);
  if (cpu) {
    cpu::gemm_batched(trans_a, trans_b, batch, m, n, k, 1.0f, af.data<float>(), a.size(-1),
                      a.size(-1) * a.size(-2), bf.data<float>(), b.size(-1),
                      b.size(-1) * b.size(-2), 0.0f, out.data<float>(), n, m * n);
  }
  return to_dtype(out, dtype);
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
    throw ValueError(str_cat("matmul: both operands must be at least 2-D, got ", a.shape(),
                             " and ", b.shape()));
  }
  if (a.size(-1) != b.size(-2)) {
    throw ValueError(str_cat("matmul: ", a.shape(), " @ ", b.shape(), ": inner sizes ",
                             a.size(-1), " and ", b.size(-2), " differ"));
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
          b_shape.numel() == sb.size(-2) * sb.size(-1) && op_route("matmul", g.device()).native) {
        // b is one matrix for the whole batch (a weight): sa^T @ g over all batch rows stacked,
        // one GEMM instead of a product per batch summed afterwards.
        const int64_t rows = batch.numel() * sa.size(-2);
        gb = batched_product(sa.reshape({rows, sa.size(-1)}), true,
                             g.reshape({rows, g.size(-1)}), false, Shape{}, sb.dtype())
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
    saved.x_dtype = x.dtype();
    saved.w_dtype = weight.dtype();
    saved.has_bias = bias.defined();
    saved.bias_dtype = saved.has_bias ? bias.dtype() : DType::f32;
    node->set_backward([dims, layout, saved](BackwardContext& ctx) -> std::vector<Tensor> {
      const OpRoute route = op_route("linear backward", ctx.grad_output().device());
      if (route.native) return native_linear_backward(route, ctx, layout, dims, saved);
      // bf16 forward, bf16 gradients (as PyTorch computes the gradients of a bf16 linear);
      // otherwise fp32, which the node rounds to the inputs' dtypes.
      const bool bf16 = saved.x_dtype == DType::bf16 && saved.w_dtype == DType::bf16;
      const DType compute = bf16 ? DType::bf16 : DType::f32;
      const Tensor g = contiguous_as(ctx.grad_output(), compute);
      const Device device = g.device();
      const bool cpu = route.cpu;
      const bool out_in = layout == WeightLayout::out_in;
      Tensor gx, gw, gb;
      if (ctx.needs_input_grad(0)) {
        // gx[rows, in] = g[rows, out] @ W, W being [out, in] (out_in) or [in, out] transposed.
        const Tensor w = contiguous_as(ctx.saved(static_cast<size_t>(saved.w_slot)), compute);
        gx = Tensor::empty(saved.x_shape, compute, device);
        if (cpu) {
          gemm_any(false, !out_in, dims.rows, dims.in, dims.out, g, dims.out, w,
                   out_in ? dims.in : dims.out, gx, dims.in);
        }
      }
      if (ctx.needs_input_grad(1)) {
        // gw = g^T @ x ([out, in]) or x^T @ g ([in, out]).
        const Tensor x = contiguous_as(ctx.saved(static_cast<size_t>(saved.x_slot)), compute);
        gw = Tensor::empty(out_in ? Shape{dims.out, dims.in} : Shape{dims.in, dims.out}, compute,
                           device);
        if (cpu && out_in) {
          gemm_any(true, false, dims.out, dims.in, dims.rows, g, dims.out, x, dims.in, gw, dims.in);
        } else if (cpu) {
          gemm_any(true, false, dims.in, dims.out, dims.rows, x, dims.in, g, dims.out, gw, dims.out);
        }
      }
      if (saved.has_bias && ctx.needs_input_grad(2)) {
        gb = Tensor::empty(Shape{dims.out}, DType::f32, device);
        if (bf16) {
          // The column sums as ones[1, rows] @ g in fp32, without an fp32 copy of g.
          const Tensor ones = Tensor::ones({dims.rows}, DType::bf16, device);
          if (cpu) {
            cpu::gemm_bf16(false, false, 1, dims.out, dims.rows, 1.0f, ones.data<BFloat16>(),
                           dims.rows, g.data<BFloat16>(), dims.out, 0.0f, gb.data_ptr(),
                           DType::f32, dims.out);
          }
        } else if (cpu) {
          cpu::sum_middle(g.data<float>(), 1, dims.rows, dims.out, gb.data<float>());
        }
      }
      return {gx, gw, gb};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom
