// matmul and linear on cpu::gemm. Gradients of weights are computed as one GEMM over all
// leading dimensions of x (the tokens of a batch), never per sample.
#include "ops/linear.h"

#include "autograd/function_node.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/reduction.h"
#include "core/error.h"
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

Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      WeightLayout layout, const LinearDims& dims) {
  std::vector<int64_t> out_dims = x.shape().to_vector();
  out_dims.back() = dims.out;
  Tensor out = Tensor::empty(Shape(out_dims), DType::f32, x.device());
  const Tensor xf = f32_contiguous(x);
  const Tensor wf = f32_contiguous(weight);
  const Tensor bf = bias.defined() ? f32_contiguous(bias) : Tensor();
  if (computes_on_cpu("linear", x.device())) {
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

// Contiguous fp32 batched product of a [batch, M, K] (or its transpose) and b.
Tensor batched_product(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                       const Shape& batch_shape) {
  const int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const int64_t k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t n = trans_b ? b.size(-2) : b.size(-1);
  std::vector<int64_t> out_dims = batch_shape.to_vector();
  out_dims.push_back(m);
  out_dims.push_back(n);
  Tensor out = Tensor::empty(Shape(out_dims), DType::f32, a.device());
  const Tensor af = f32_contiguous(a);
  const Tensor bf = f32_contiguous(b);
  if (computes_on_cpu("matmul", a.device())) {
    const int64_t batch = batch_shape.numel();
    cpu::gemm_batched(trans_a, trans_b, batch, m, n, k, 1.0f, af.data<float>(), a.size(-1),
                      a.size(-1) * a.size(-2), bf.data<float>(), b.size(-1),
                      b.size(-1) * b.size(-2), 0.0f, out.data<float>(), n, m * n);
  }
  return out;
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
  Tensor out = to_dtype(
      batched_product(expand_batch(a, batch), false, expand_batch(b, batch), false, batch),
      a.dtype() == b.dtype() ? a.dtype() : DType::f32);
  if (auto node = make_function_node("MatmulBackward", {a, b})) {
    node->save(a);
    node->save(b);
    const Shape a_shape = a.shape(), b_shape = b.shape();
    node->set_backward([batch, a_shape, b_shape](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& g = ctx.grad_output();
      const Tensor sa = expand_batch(ctx.saved(0), batch);
      const Tensor sb = expand_batch(ctx.saved(1), batch);
      Tensor ga, gb;
      if (ctx.needs_input_grad(0)) {
        ga = sum_to_shape(batched_product(g, false, sb, true, batch), a_shape);
      }
      if (ctx.needs_input_grad(1)) {
        gb = sum_to_shape(batched_product(sa, true, g, false, batch), b_shape);
      }
      return {ga, gb};
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, WeightLayout layout) {
  if (auto cast = autocast_inputs("linear", {x, weight, bias})) {
    return linear((*cast)[0], (*cast)[1], (*cast)[2], layout);
  }
  const LinearDims dims = linear_dims(x, weight, bias, layout);
  Tensor out = linear_forward(x, weight, bias, layout, dims);
  if (auto node = make_function_node("LinearBackward", {x, weight, bias})) {
    node->save(x);
    node->save(weight);
    const bool has_bias = bias.defined();
    const Shape x_shape = x.shape();
    node->set_backward([dims, layout, has_bias, x_shape](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor g = f32_contiguous(ctx.grad_output());
      const Device device = g.device();
      const bool cpu = computes_on_cpu("linear backward", device);
      Tensor gx, gw, gb;
      if (ctx.needs_input_grad(0)) {
        const Tensor w = f32_contiguous(ctx.saved(1));
        gx = Tensor::empty(x_shape, DType::f32, device);
        if (cpu && layout == WeightLayout::out_in) {
          cpu::gemm(false, false, dims.rows, dims.in, dims.out, 1.0f, g.data<float>(), dims.out,
                    w.data<float>(), dims.in, 0.0f, gx.data<float>(), dims.in);
        } else if (cpu) {
          cpu::gemm(false, true, dims.rows, dims.in, dims.out, 1.0f, g.data<float>(), dims.out,
                    w.data<float>(), dims.out, 0.0f, gx.data<float>(), dims.in);
        }
      }
      if (ctx.needs_input_grad(1)) {
        const Tensor x = f32_contiguous(ctx.saved(0));
        gw = Tensor::empty(layout == WeightLayout::out_in ? Shape{dims.out, dims.in}
                                                          : Shape{dims.in, dims.out},
                           DType::f32, device);
        if (cpu && layout == WeightLayout::out_in) {
          cpu::gemm(true, false, dims.out, dims.in, dims.rows, 1.0f, g.data<float>(), dims.out,
                    x.data<float>(), dims.in, 0.0f, gw.data<float>(), dims.in);
        } else if (cpu) {
          cpu::gemm(true, false, dims.in, dims.out, dims.rows, 1.0f, x.data<float>(), dims.in,
                    g.data<float>(), dims.out, 0.0f, gw.data<float>(), dims.out);
        }
      }
      if (has_bias && ctx.needs_input_grad(2)) {
        gb = Tensor::empty(Shape{dims.out}, DType::f32, device);
        if (cpu) cpu::sum_middle(g.data<float>(), 1, dims.rows, dims.out, gb.data<float>());
      }
      return {gx, gw, gb};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom
