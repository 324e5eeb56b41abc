// Dropout whose mask is regenerated from the Philox stream in backward instead of being saved.
//
// Note [Dropout mask]
// A call reserves x.numel() numbers of its generator's stream, as Tensor::rand does, and gets
// (seed, offset). Element i of x (row-major) is kept when u_i >= p, where
// u_i = philox_uniform01(word i of the draw) in [0, 1) is the number Tensor::rand would put at i
// (see Note [Philox stream layout]); kept elements are scaled by 1 / (1 - p). u_i is a multiple
// of 2^-24, so the test is the integer one (word_i >> 8) >= ceil(p * 2^24), which any backend
// evaluates identically. The mask is thus a pure function of (seed, offset, i): backward, a
// recompute under activation checkpointing, and a CUDA kernel all see the same one, and
// nothing mask-sized is ever stored.
#include "ops/dropout.h"

#include <cmath>

#include "autograd/function_node.h"
#include "backend/dropout_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/elementwise.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

struct DropoutMask {
  PhiloxState rng;
  uint32_t threshold;  // keep when the 24-bit word is >= this
  float scale;         // 1 / (1 - p); 0 when p == 1, so nothing is scaled by infinity
};

// x with the mask applied, in `dtype`.
Tensor dropout_apply(const Tensor& x, const DropoutMask& mask, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  need_kernel("dropout", x.device(), &DropoutKernels::apply)(
      x.contiguous(), mask.rng.seed, mask.rng.offset, mask.threshold, mask.scale, out);
  return out;
}

void check_p(const char* op, double p) {
  if (!(p >= 0.0 && p <= 1.0)) throw ValueError(str_cat(op, ": p = ", p, " must be in [0, 1]"));
}

// Reserves x.numel() numbers of the generator's stream for x's mask.
DropoutMask draw_mask(const Tensor& x, double p, Generator* generator) {
  DropoutMask mask;
  mask.rng =
      (generator ? *generator : default_generator()).reserve(static_cast<uint64_t>(x.numel()));
  mask.threshold = static_cast<uint32_t>(std::ceil(p * 16777216.0));  // 2^24
  mask.scale = p == 1.0 ? 0.0f : static_cast<float>(1.0 / (1.0 - p));
  return mask;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  RecordFunction record("dropout", x);
  check_floating("dropout", "x", x);
  check_p("dropout", p);
  if (!training || p == 0.0) return x;
  const DropoutMask mask = draw_mask(x, p, generator);
  const DType dtype = x.dtype();
  Tensor out = dropout_apply(x, mask, dtype);
  if (auto node = make_function_node("DropoutBackward0", {x})) {
    node->set_backward([mask, dtype](BackwardContext& ctx) -> std::vector<Tensor> {
      return {dropout_apply(ctx.grad_output(), mask, dtype)};
    });
    // The kernel reads the gradient in any dtype: a residual add's fp32 gradient of a bf16
    // branch is masked and rounded once, with no cast to bf16 before (function_node.h).
    if (dtype == DType::bf16 || dtype == DType::f16) node->accept_grad_in(DType::f32);
    node->set_outputs({out});
  }
  return out;
}

Tensor dropout_add(const Tensor& residual, const Tensor& x, double p, bool training,
                   Generator* generator) {
  RecordFunction record("dropout_add", residual, x);
  check_floating("dropout_add", "residual", residual);
  check_floating("dropout_add", "x", x);
  check_same_device("dropout_add", {residual, x});
  check_p("dropout_add", p);
  if (!training || p == 0.0 || residual.shape() != x.shape()) {
    return add(residual, dropout(x, p, training, generator));
  }
  const DropoutMask mask = draw_mask(x, p, generator);
  // add's promotion (ops/elementwise.cpp): equal dtypes stay, mixed ones sum in f32.
  const DType dtype = residual.dtype() == x.dtype() ? x.dtype() : DType::f32;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  need_kernel("dropout_add", x.device(), &DropoutKernels::apply_add)(
      x.contiguous(), residual.contiguous(), mask.rng.seed, mask.rng.offset, mask.threshold,
      mask.scale, out);
  if (auto node = make_function_node("DropoutAddBackward0", {residual, x})) {
    const DType x_dtype = x.dtype();
    // add's backward hands the gradient to both sides; dropout's masks x's share, as the two
    // nodes did (the engine casts the residual's share when its dtype differs).
    node->set_backward([mask, x_dtype](BackwardContext& ctx) -> std::vector<Tensor> {
      Tensor dx;
      if (ctx.needs_input_grad(1)) dx = dropout_apply(ctx.grad_output(), mask, x_dtype);
      return {ctx.needs_input_grad(0) ? ctx.grad_output() : Tensor(), dx};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom
