// cross_entropy and linear_cross_entropy. Neither ever holds a probability tensor: backward
// writes softmax - onehot straight into the gradient, and the fused LM-head loss turns each chunk
// of logits into its gradient in place before the two GEMMs that consume it.
#include "ops/cross_entropy.h"

#include <algorithm>
#include <limits>

#include "autograd/function_node.h"
#include "backend/cpu/cross_entropy.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/gemm.h"
#include "backend/cross_entropy_kernels.h"
#include "backend/gemm_kernels.h"
#include "core/dtype_convert.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/elementwise.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

// Rows of low-precision logits widened to fp32 at a time (fp32 logits are used in place).
constexpr int64_t kWidenBytes = int64_t{16} << 20;

int64_t widen_chunk_rows(const Tensor& logits, int64_t rows, int64_t vocab) {
  if (logits.dtype() == DType::f32 && logits.is_contiguous()) return std::max<int64_t>(rows, 1);
  return std::max<int64_t>(1, kWidenBytes / (4 * vocab));
}

// Checks that targets are integers shaped as `input` without its last dimension.
void check_targets(const char* op, const char* input_name, const Tensor& input,
                   const Tensor& targets) {
  if (!targets.defined()) throw ValueError(str_cat(op, ": targets is undefined"));
  if (targets.dtype() != DType::i64 && targets.dtype() != DType::i32) {
    throw ValueError(
        str_cat(op, ": targets must be i32 or i64, not ", dtype_name(targets.dtype())));
  }
  std::vector<int64_t> leading = input.shape().to_vector();
  leading.pop_back();
  if (targets.shape() != Shape(leading)) {
    throw ValueError(str_cat(op, ": targets ", targets.shape(), " must have the shape ",
                             Shape(leading), " of ", input_name, " ", input.shape(),
                             " without its last dimension"));
  }
}

// Calls fn with the targets' data as const int64_t* or const int32_t*.
template <typename Fn>
auto with_targets(const Tensor& targets, Fn&& fn) {
  if (targets.dtype() == DType::i64) {
    return fn(static_cast<const int64_t*>(targets.data<int64_t>()));
  }
  return fn(static_cast<const int32_t*>(targets.data<int32_t>()));
}

[[noreturn]] void throw_bad_target(const char* op, int64_t value, int64_t position, int64_t vocab,
                                   int64_t ignore_index) {
  throw IndexError(str_cat(op, ": target ", value, " at position ", position,
                           " is out of range [0, ", vocab, ") and is not ignore_index (",
                           ignore_index, ")"));
}

// The number of targets that are not ignore_index; IndexError for one outside [0, vocab).
int64_t count_targets(const char* op, const Tensor& targets, int64_t vocab, int64_t ignore_index) {
  return with_targets(targets, [&](const auto* t) {
    int64_t count = 0;
    for (int64_t r = 0; r < targets.numel(); ++r) {
      const int64_t v = t[r];
      if (v == ignore_index) continue;
      if (v < 0 || v >= vocab) throw_bad_target(op, v, r, vocab, ignore_index);
      ++count;
    }
    return count;
  });
}

// count_targets on a native device: one read-back, with the same IndexError as on the CPU. The
// meta device has no targets to count (0).
int64_t native_count_targets(const OpRoute& route, const char* op, const Tensor& targets,
                             int64_t vocab, int64_t ignore_index) {
  if (!route.kernels) return 0;
  int64_t first_bad = -1;
  const int64_t count =
      route.need(&CrossEntropyKernels::count_targets)(targets, vocab, ignore_index, &first_bad);
  if (first_bad >= 0) {
    const Tensor value = targets.reshape({-1}).narrow(0, first_bad, 1).to(kCPU);
    throw_bad_target(op, value.to_int64_vector()[0], first_bad, vocab, ignore_index);
  }
  return count;
}

// Each counted target contributes 1 / count of the mean loss.
float mean_scale(int64_t count) {
  return count == 0 ? 0.0f : static_cast<float>(1.0 / static_cast<double>(count));
}

// logits as [rows, vocab] rows with a unit column stride (a view when the layout allows).
Tensor logit_rows(const Tensor& logits, int64_t rows, int64_t vocab) {
  const Tensor view = logits.reshape({rows, vocab});
  return vocab == 1 || view.stride(1) == 1 ? view : view.contiguous();
}

// The mean loss from the sum over counted targets; NaN when none counted, as torch's mean.
float mean_loss(double total, int64_t count) {
  return count == 0 ? std::numeric_limits<float>::quiet_NaN()
                    : static_cast<float>(total / static_cast<double>(count));
}

std::vector<Tensor> cross_entropy_backward(BackwardContext& ctx, int64_t count,
                                           int64_t ignore_index) {
  const Tensor logits = ctx.saved(0);
  const Tensor lse = ctx.saved(1);
  const Tensor targets = ctx.saved(2);
  const Device device = logits.device();
  const int64_t vocab = logits.size(-1);
  const int64_t rows = logits.numel() / vocab;
  const OpRoute route = op_route("cross_entropy backward", device);
  if (route.native) {
    // The gradient in the logits' dtype straight from the kernel; the incoming gradient is read
    // on the device.
    Tensor grad = Tensor::empty(logits.shape(), logits.dtype(), device);
    if (route.kernels) {
      route.need(&CrossEntropyKernels::backward)(
          logit_rows(logits, rows, vocab), lse, targets.reshape({rows}), ignore_index,
          mean_scale(count), ctx.grad_output(), grad.view({rows, vocab}));
    }
    return {grad};
  }
  const bool cpu = route.cpu;
  const float scale = cpu ? static_cast<float>(ctx.grad_output().item() / count) : 0.0f;
  // The gradient in the logits' dtype, written chunk by chunk: a low-precision gradient goes
  // through one chunk of fp32 workspace, never a full fp32 copy.
  const int64_t chunk = widen_chunk_rows(logits, rows, vocab);
  const bool direct = chunk >= rows;
  Tensor grad = Tensor::empty(logits.shape(), direct ? DType::f32 : logits.dtype(), device);
  const Tensor logits2d = logits.reshape({rows, vocab});
  const Tensor grad2d = grad.view({rows, vocab});
  Tensor workspace;
  if (!direct) workspace = Tensor::empty({std::min(chunk, rows), vocab}, DType::f32, device);
  for (int64_t begin = 0; begin < rows; begin += chunk) {
    const int64_t n = std::min(chunk, rows - begin);
    const Tensor part = f32_contiguous(logits2d.narrow(0, begin, n));
    const Tensor out = direct ? grad2d : workspace.narrow(0, 0, n);
    if (cpu) {
      with_targets(targets, [&](const auto* t) {
        cpu::cross_entropy_backward(part.data<float>(), lse.data<float>() + begin, t + begin, n,
                                    vocab, ignore_index, scale, out.data<float>());
      });
    }
    if (!direct) grad2d.narrow(0, begin, n).copy_(out);
  }
  return {grad};
}

// Records cross_entropy's node: backward needs the logits, their log-sum-exp and the targets.
void save_for_cross_entropy_backward(const Tensor& logits, const Tensor& lse, const Tensor& t,
                                     int64_t count, int64_t ignore_index, const Tensor& out) {
  if (auto node = make_function_node("CrossEntropyBackward0", {logits})) {
    node->save(logits);
    node->save(lse);
    node->save(t);
    node->set_backward([count, ignore_index](BackwardContext& ctx) {
      return cross_entropy_backward(ctx, count, ignore_index);
    });
    node->set_outputs({out});
  }
}

struct LossAndGrads {
  Tensor out;  // the mean loss, 0-d f32
  Tensor dx;   // of the mean loss, before the incoming gradient; undefined when not needed
  Tensor dweight;
};

// The native linear_cross_entropy (Note [Native allocation pattern]): the CPU path's chunks, on
// the device's GEMM and loss kernels. x and weight are read in their dtype when they share one
// (f32 copies only when they differ); the loss stays on the device.
LossAndGrads native_linear_cross_entropy(const OpRoute& route, const FunctionNode* node,
                                         const Tensor& x, const Tensor& weight, const Tensor& t,
                                         int64_t ignore_index, int64_t chunk_rows, int64_t rows) {
  const Device device = x.device();
  const int64_t vocab = weight.size(0);
  const int64_t dim = weight.size(1);
  const int64_t count = native_count_targets(route, "linear_cross_entropy", t, vocab, ignore_index);
  const DType operand = x.dtype() == weight.dtype() ? x.dtype() : DType::f32;
  const Tensor xc = contiguous_as(x, operand).reshape({rows, dim});
  const Tensor wc = contiguous_as(weight, operand);
  const int64_t chunk = std::max<int64_t>(1, std::min(chunk_rows, rows));
  LossAndGrads result;
  Tensor logits = Tensor::empty({chunk, vocab}, DType::f32, device);
  Tensor lse = Tensor::empty({chunk}, DType::f32, device);
  Tensor row_loss = Tensor::empty({rows}, DType::f32, device);
  // dx is written once per chunk, so in the operand dtype; dweight accumulates over chunks in f32.
  if (node && node->needs_input_grad(0)) result.dx = Tensor::empty(x.shape(), operand, device);
  if (node && node->needs_input_grad(1)) {
    result.dweight = Tensor::empty({vocab, dim}, DType::f32, device);
  }
  const bool grads = result.dx.defined() || result.dweight.defined();
  // The GEMMs take the logits' gradient in the operand dtype: a second chunk buffer unless f32
  // (then the gradient replaces the logits in place).
  Tensor dlogits;
  if (grads && operand != DType::f32) dlogits = Tensor::empty({chunk, vocab}, operand, device);
  result.out = Tensor::empty(Shape{}, DType::f32, device);
  if (!route.kernels) return result;
  const auto& gemm = route.need(&GemmKernels::gemm);
  const auto& forward = route.need(&CrossEntropyKernels::forward);
  const auto* backward = grads ? &route.need(&CrossEntropyKernels::backward) : nullptr;
  const Tensor t_rows = t.reshape({rows});
  const Tensor dx_rows = result.dx.defined() && dim > 0 ? result.dx.view({rows, dim}) : Tensor();
  const float scale = mean_scale(count);
  for (int64_t begin = 0; begin < rows; begin += chunk) {
    const int64_t n = std::min(chunk, rows - begin);
    const Tensor x_chunk = xc.narrow(0, begin, n);
    const Tensor t_chunk = t_rows.narrow(0, begin, n);
    const Tensor chunk_logits = logits.narrow(0, 0, n);
    const Tensor chunk_lse = lse.narrow(0, 0, n);
    if (dim == 0) {
      chunk_logits.zero_();
    } else {
      gemm(false, true, x_chunk, wc, 1.0f, 0.0f, chunk_logits, GemmEpilogue::none, Tensor());
    }
    forward(chunk_logits, t_chunk, ignore_index, chunk_lse, row_loss.narrow(0, begin, n));
    if (!grads) continue;
    const Tensor d = dlogits.defined() ? dlogits.narrow(0, 0, n) : chunk_logits;
    (*backward)(chunk_logits, chunk_lse, t_chunk, ignore_index, scale, Tensor(), d);
    if (dim == 0) continue;
    if (dx_rows.defined()) {
      gemm(false, false, d, wc, 1.0f, 0.0f, dx_rows.narrow(0, begin, n), GemmEpilogue::none,
           Tensor());
    }
    if (result.dweight.defined()) {
      gemm(true, false, d, x_chunk, 1.0f, begin == 0 ? 0.0f : 1.0f, result.dweight,
           GemmEpilogue::none, Tensor());
    }
  }
  if (result.dweight.defined() && (rows == 0 || dim == 0)) result.dweight.zero_();
  route.need(&CrossEntropyKernels::mean_loss)(row_loss, count, result.out);
  return result;
}

// Records linear_cross_entropy's node: dx and dweight were computed in the forward pass and are
// scaled by the incoming gradient in backward (in place unless the graph is retained).
void save_linear_cross_entropy_grads(const std::shared_ptr<FunctionNode>& node, const Tensor& dx,
                                     const Tensor& dweight, const Tensor& out) {
  if (!node) return;
  node->save(dx);
  node->save(dweight);
  node->set_backward([](BackwardContext& ctx) -> std::vector<Tensor> {
    Tensor dx = ctx.saved(0), dweight = ctx.saved(1);
    const Tensor& g = ctx.grad_output();
    const OpRoute route = op_route("linear_cross_entropy backward", g.device());
    if (route.native) {
      // The factor is applied on the device without being read, so even a factor of 1 costs
      // this pass (no host sync).
      for (Tensor* grad : {&dx, &dweight}) {
        if (!grad->defined()) continue;
        const Tensor source = *grad;
        if (ctx.retains_saved()) {  // the saved buffer must stay as it is
          *grad = Tensor::empty(source.shape(), source.dtype(), source.device());
        }
        if (route.kernels) route.need(&CrossEntropyKernels::scale_by_scalar)(source, g, *grad);
      }
      return {dx, dweight};
    }
    const bool cpu = route.cpu;
    // The meta device has no value to read: it plans for a factor other than 1 (a loss scale),
    // which costs no memory unless the graph is retained.
    const double factor = cpu ? g.item() : 2.0;
    if (factor == 1.0) return {dx, dweight};
    for (Tensor* grad : {&dx, &dweight}) {
      if (!grad->defined()) continue;
      if (ctx.retains_saved()) {
        *grad = scale(*grad, factor);  // the saved buffer must stay as it is
      } else if (cpu) {
        // Only this node reads the buffer, and it is released after this backward.
        float* p = grad->data<float>();
        cpu::scale(p, static_cast<float>(factor), p, grad->numel());
      }
    }
    return {dx, dweight};
  });
  node->set_outputs({out});
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  RecordFunction record("cross_entropy", logits, targets);
  const char* op = "cross_entropy";
  check_floating(op, "logits", logits);
  const OpRoute route = op_route(op, logits.device());
  // A native device's kernels read bf16 / f16 logits and compute in fp32, which is autocast's
  // fp32 policy without its fp32 copy: the widening is exact and the gradient is rounded once to
  // the logits' dtype either way, so the results are the same.
  if (!route.native) {
    if (auto cast = autocast_inputs("cross_entropy", {logits})) {
      return cross_entropy((*cast)[0], targets, ignore_index);
    }
  }
  check_same_device(op, {logits, targets});
  if (logits.ndim() < 1 || logits.size(-1) == 0) {
    throw ValueError(str_cat(op, ": logits ", logits.shape(),
                             " must have a last (class) dimension of size > 0"));
  }
  check_targets(op, "logits", logits, targets);
  const Device device = logits.device();
  const int64_t vocab = logits.size(-1);
  const int64_t rows = logits.numel() / vocab;
  const bool cpu = route.cpu;
  const Tensor t = targets.contiguous();
  if (route.native) {
    const int64_t count = native_count_targets(route, op, t, vocab, ignore_index);
    Tensor lse = Tensor::empty({rows}, DType::f32, device);
    Tensor out = Tensor::empty(Shape{}, DType::f32, device);
    {
      // The logits are read in their dtype: no fp32 copy, whole or in chunks.
      const Tensor row_loss = Tensor::empty({rows}, DType::f32, device);
      if (route.kernels) {
        route.need(&CrossEntropyKernels::forward)(logit_rows(logits, rows, vocab),
                                                        t.reshape({rows}), ignore_index, lse,
                                                        row_loss);
        route.need(&CrossEntropyKernels::mean_loss)(row_loss, count, out);
      }
    }
    save_for_cross_entropy_backward(logits, lse, t, count, ignore_index, out);
    return out;
  }
  const int64_t count = cpu ? count_targets(op, t, vocab, ignore_index) : 0;
  Tensor lse = Tensor::empty({rows}, DType::f32, device);
  Tensor out = Tensor::empty(Shape{}, DType::f32, device);
  const int64_t chunk = widen_chunk_rows(logits, rows, vocab);
  const Tensor logits2d = logits.reshape({rows, vocab});
  double total = 0.0;
  for (int64_t begin = 0; begin < rows; begin += chunk) {
    const int64_t n = std::min(chunk, rows - begin);
    const Tensor part = f32_contiguous(logits2d.narrow(0, begin, n));
    if (cpu) {
      total += with_targets(t, [&](const auto* tp) {
        return cpu::cross_entropy_forward(part.data<float>(), tp + begin, n, vocab, ignore_index,
                                          lse.data<float>() + begin);
      });
    }
  }
  if (cpu) out.data<float>()[0] = mean_loss(total, count);
  save_for_cross_entropy_backward(logits, lse, t, count, ignore_index, out);
  return out;
}

int64_t linear_cross_entropy_chunk_rows(int64_t vocab) {
  return std::max<int64_t>(128, (int64_t{16} << 20) / (4 * std::max<int64_t>(vocab, 1)));
}

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index) {
  return linear_cross_entropy_chunked(
      x, weight, targets, ignore_index,
      linear_cross_entropy_chunk_rows(weight.defined() && weight.ndim() == 2 ? weight.size(0) : 1));
}

Tensor linear_cross_entropy_chunked(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                    int64_t ignore_index, int64_t chunk_rows) {
  RecordFunction record("linear_cross_entropy", x, weight, targets);
  if (auto cast = autocast_inputs("linear_cross_entropy", {x, weight})) {
    return linear_cross_entropy_chunked((*cast)[0], (*cast)[1], targets, ignore_index, chunk_rows);
  }
  const char* op = "linear_cross_entropy";
  check_floating(op, "x", x);
  check_floating(op, "weight", weight);
  check_same_device(op, {x, weight, targets});
  if (x.ndim() < 1 || weight.ndim() != 2 || weight.size(0) == 0) {
    throw ValueError(str_cat(op, ": x ", x.shape(), " must be at least 1-D and weight ",
                             weight.shape(), " 2-D [vocab > 0, features]"));
  }
  if (x.size(-1) != weight.size(1)) {
    throw ValueError(str_cat(op, ": x has ", x.size(-1), " features but weight ", weight.shape(),
                             " ([vocab, features]) expects ", weight.size(1)));
  }
  if (chunk_rows <= 0) throw ValueError(str_cat(op, ": chunk_rows ", chunk_rows, " must be > 0"));
  check_targets(op, "x", x, targets);
  const Device device = x.device();
  const int64_t vocab = weight.size(0);
  const int64_t dim = weight.size(1);
  const int64_t rows = dim == 0 ? targets.numel() : x.numel() / dim;
  const OpRoute route = op_route(op, device);
  const bool cpu = route.cpu;
  const Tensor t = targets.contiguous();
  if (route.native) {
    auto node = make_function_node("LinearCrossEntropyBackward0", {x, weight});
    const LossAndGrads result =
        native_linear_cross_entropy(route, node.get(), x, weight, t, ignore_index, chunk_rows, rows);
    save_linear_cross_entropy_grads(node, result.dx, result.dweight, result.out);
    return result.out;
  }
  const int64_t count = cpu ? count_targets(op, t, vocab, ignore_index) : 0;

  auto node = make_function_node("LinearCrossEntropyBackward0", {x, weight});
  // bf16 x and weight: the three GEMMs run on cpu::gemm_bf16 (the logits' gradient rounded to
  // bf16 for them, as a bf16 LM head's backward sees it); otherwise fp32 operands.
  const bool bf16 = all_bf16({x, weight});
  const DType operand_dtype = bf16 ? DType::bf16 : DType::f32;
  const Tensor xc = contiguous_as(x, operand_dtype);
  const Tensor wc = contiguous_as(weight, operand_dtype);
  const int64_t chunk = std::max<int64_t>(1, std::min(chunk_rows, rows));
  Tensor logits = Tensor::empty({chunk, vocab}, DType::f32, device);
  Tensor lse = Tensor::empty({chunk}, DType::f32, device);
  Tensor dx, dweight, dlogits_bf16;
  if (node && node->needs_input_grad(0)) dx = Tensor::empty(x.shape(), DType::f32, device);
  if (node && node->needs_input_grad(1)) dweight = Tensor::empty({vocab, dim}, DType::f32, device);
  if (bf16 && (dx.defined() || dweight.defined())) {
    dlogits_bf16 = Tensor::empty({chunk, vocab}, DType::bf16, device);
  }
  Tensor out = Tensor::empty(Shape{}, DType::f32, device);
  if (cpu) {
    float* lp = logits.data<float>();
    // C[n, cols] = A[n, k] @ op(B) over the operand dtype, into fp32.
    auto product = [&](bool trans_a, bool trans_b, int64_t m, int64_t cols, int64_t k,
                       const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                       float* c, int64_t ldc) {
      if (bf16) {
        cpu::gemm_bf16(trans_a, trans_b, m, cols, k, 1.0f, static_cast<const BFloat16*>(a), lda,
                       static_cast<const BFloat16*>(b), ldb, beta, c, DType::f32, ldc);
      } else {
        cpu::gemm(trans_a, trans_b, m, cols, k, 1.0f, static_cast<const float*>(a), lda,
                  static_cast<const float*>(b), ldb, beta, c, ldc);
      }
    };
    const size_t element = dtype_size(operand_dtype);
    const char* xp = static_cast<const char*>(xc.data_ptr());
    const void* wp = wc.data_ptr();
    // Each counted target contributes 1 / count of the mean; the incoming gradient comes later.
    const float scale = count == 0 ? 0.0f : static_cast<float>(1.0 / static_cast<double>(count));
    double total = 0.0;
    for (int64_t begin = 0; begin < rows; begin += chunk) {
      const int64_t n = std::min(chunk, rows - begin);
      const void* x_chunk = xp + static_cast<size_t>(begin * dim) * element;
      product(false, true, n, vocab, dim, x_chunk, dim, wp, dim, 0.0f, lp, vocab);
      with_targets(t, [&](const auto* tp) {
        total +=
            cpu::cross_entropy_forward(lp, tp + begin, n, vocab, ignore_index, lse.data<float>());
        if (dx.defined() || dweight.defined()) {
          cpu::cross_entropy_backward(lp, lse.data<float>(), tp + begin, n, vocab, ignore_index,
                                      scale, lp);
        }
      });
      const void* dlogits = lp;
      if (dlogits_bf16.defined()) {
        convert_from_f32(lp, dlogits_bf16.data_ptr(), DType::bf16, static_cast<size_t>(n * vocab));
        dlogits = dlogits_bf16.data_ptr();
      }
      if (dx.defined()) {
        product(false, false, n, dim, vocab, dlogits, vocab, wp, dim, 0.0f,
                dx.data<float>() + begin * dim, dim);
      }
      if (dweight.defined()) {
        product(true, false, vocab, dim, n, dlogits, vocab, x_chunk, dim,
                begin == 0 ? 0.0f : 1.0f, dweight.data<float>(), dim);
      }
    }
    if (dweight.defined() && rows == 0) dweight.zero_();
    out.data<float>()[0] = mean_loss(total, count);
  }
  save_linear_cross_entropy_grads(node, dx, dweight, out);
  return out;
}

}  // namespace headroom
