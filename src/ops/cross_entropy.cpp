// cross_entropy and linear_cross_entropy on the device's cross-entropy and gemm tables, one code
// path on every device. Neither ever holds a probability tensor: backward writes softmax - onehot
// straight into the gradient, and the fused LM-head loss turns each chunk of logits into its
// gradient in place before the two GEMMs that consume it.
#include "ops/cross_entropy.h"

#include <algorithm>

#include "autograd/function_node.h"
#include "backend/activation_kernels.h"
#include "backend/cross_entropy_kernels.h"
#include "backend/gemm_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

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

[[noreturn]] void throw_bad_target(const char* op, int64_t value, int64_t position, int64_t vocab,
                                   int64_t ignore_index) {
  throw IndexError(str_cat(op, ": target ", value, " at position ", position,
                           " is out of range [0, ", vocab, ") and is not ignore_index (",
                           ignore_index, ")"));
}

// The number of targets that are not ignore_index (one read-back on a GPU); IndexError for one
// outside [0, vocab). The meta device has no targets to count (0).
int64_t count_targets(const char* op, const Tensor& targets, int64_t vocab, int64_t ignore_index) {
  int64_t first_bad = -1;
  const int64_t count = need_kernel(op, targets.device(), &CrossEntropyKernels::count_targets)(
      targets, vocab, ignore_index, &first_bad);
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

std::vector<Tensor> cross_entropy_backward(BackwardContext& ctx, int64_t count,
                                           int64_t ignore_index) {
  const Tensor logits = ctx.saved(0);
  const Tensor lse = ctx.saved(1);
  const Tensor targets = ctx.saved(2);
  const Device device = logits.device();
  const int64_t vocab = logits.size(-1);
  const int64_t rows = logits.numel() / vocab;
  // The gradient in the logits' dtype straight from the kernel; the incoming gradient is read on
  // the device.
  Tensor grad = Tensor::empty(logits.shape(), logits.dtype(), device);
  need_kernel("cross_entropy backward", device, &CrossEntropyKernels::backward)(
      logit_rows(logits, rows, vocab), lse, targets.reshape({rows}), ignore_index,
      mean_scale(count), 0.0f, ctx.grad_output(), grad.view({rows, vocab}));
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

// linear_cross_entropy's chunks on the device's GEMM and loss kernels. x and weight are read in
// their dtype when they share one (f32 copies only when they differ); the loss stays on the
// device. softcap > 0 caps each chunk's logits in place before the loss (0: none).
LossAndGrads chunked_loss_and_grads(const FunctionNode* node, const Tensor& x, const Tensor& weight,
                                    const Tensor& t, int64_t ignore_index, int64_t chunk_rows,
                                    int64_t rows, int64_t target_count, float softcap) {
  const char* op = "linear_cross_entropy";
  const Device device = x.device();
  const int64_t vocab = weight.size(0);
  const int64_t dim = weight.size(1);
  const int64_t count =
      target_count >= 0 ? target_count : count_targets(op, t, vocab, ignore_index);
  const DType operand = x.dtype() == weight.dtype() ? x.dtype() : DType::f32;
  const Tensor xc = (x.dtype() == operand ? x : x.to(operand)).contiguous().reshape({rows, dim});
  const Tensor wc = (weight.dtype() == operand ? weight : weight.to(operand)).contiguous();
  if (chunk_rows == 0) {
    // Note [Loss chunks]: fp32 logits, and their gradient beside them unless it is fp32 too.
    const bool grads = node && (node->needs_input_grad(0) || node->needs_input_grad(1));
    const int64_t bytes = 4 + (grads && operand != DType::f32 ? dtype_size(operand) : 0);
    chunk_rows = linear_cross_entropy_chunk_rows(vocab, rows, bytes);
  }
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
  const auto& gemm = need_kernel(op, device, &GemmKernels::gemm);
  const auto& forward = need_kernel(op, device, &CrossEntropyKernels::forward);
  const auto* backward = grads ? &need_kernel(op, device, &CrossEntropyKernels::backward) : nullptr;
  const auto* cap =
      softcap > 0.0f ? &need_kernel(op, device, &ActivationKernels::softcap_forward) : nullptr;
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
    if (cap) (*cap)(chunk_logits, softcap, chunk_logits);
    forward(chunk_logits, t_chunk, ignore_index, chunk_lse, row_loss.narrow(0, begin, n));
    if (!grads) continue;
    const Tensor d = dlogits.defined() ? dlogits.narrow(0, 0, n) : chunk_logits;
    (*backward)(chunk_logits, chunk_lse, t_chunk, ignore_index, scale, softcap, Tensor(), d);
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
  need_kernel(op, device, &CrossEntropyKernels::mean_loss)(row_loss, count, result.out);
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
    // The factor is applied on the device without being read (no host sync); the CPU's kernel
    // skips a factor of 1 in place.
    const auto& scale_by_scalar = need_kernel("linear_cross_entropy backward", g.device(),
                                              &CrossEntropyKernels::scale_by_scalar);
    for (Tensor* grad : {&dx, &dweight}) {
      if (!grad->defined()) continue;
      const Tensor source = *grad;
      if (ctx.retains_saved()) {  // the saved buffer must stay as it is
        *grad = Tensor::empty(source.shape(), source.dtype(), source.device());
      }
      scale_by_scalar(source, g, *grad);
    }
    return {dx, dweight};
  });
  node->set_outputs({out});
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     int64_t target_count) {
  RecordFunction record("cross_entropy", logits, targets);
  const char* op = "cross_entropy";
  check_floating(op, "logits", logits);
  // No autocast: the kernels read bf16 / f16 logits and compute in fp32, which is autocast's fp32
  // policy without its fp32 copy: the widening is exact and the gradient is rounded once to the
  // logits' dtype either way, so the results are the same.
  check_same_device(op, {logits, targets});
  if (logits.ndim() < 1 || logits.size(-1) == 0) {
    throw ValueError(str_cat(op, ": logits ", logits.shape(),
                             " must have a last (class) dimension of size > 0"));
  }
  check_targets(op, "logits", logits, targets);
  const Device device = logits.device();
  const int64_t vocab = logits.size(-1);
  const int64_t rows = logits.numel() / vocab;
  const Tensor t = targets.contiguous();
  const int64_t count =
      target_count >= 0 ? target_count : count_targets(op, t, vocab, ignore_index);
  Tensor lse = Tensor::empty({rows}, DType::f32, device);
  Tensor out = Tensor::empty(Shape{}, DType::f32, device);
  {
    // The logits are read in their dtype: no fp32 copy, whole or in chunks.
    const Tensor row_loss = Tensor::empty({rows}, DType::f32, device);
    need_kernel(op, device, &CrossEntropyKernels::forward)(
        logit_rows(logits, rows, vocab), t.reshape({rows}), ignore_index, lse, row_loss);
    need_kernel(op, device, &CrossEntropyKernels::mean_loss)(row_loss, count, out);
  }
  save_for_cross_entropy_backward(logits, lse, t, count, ignore_index, out);
  return out;
}

int64_t linear_cross_entropy_chunk_rows(int64_t vocab, int64_t rows, int64_t bytes_per_logit) {
  rows = std::max<int64_t>(rows, 1);
  const int64_t row_bytes = std::max<int64_t>(vocab, 1) * std::max<int64_t>(bytes_per_logit, 1);
  const int64_t fitting = std::max<int64_t>(1, kLossChunkBytes / row_bytes);
  const int64_t chunks = (rows + fitting - 1) / fitting;
  const int64_t even = (rows + chunks - 1) / chunks;
  return std::min(rows, std::max<int64_t>(even, 128));
}

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index, int64_t target_count,
                            std::optional<double> logit_softcap) {
  return linear_cross_entropy_chunked(x, weight, targets, ignore_index, 0, target_count,
                                      logit_softcap);
}

Tensor linear_cross_entropy_chunked(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                    int64_t ignore_index, int64_t chunk_rows, int64_t target_count,
                                    std::optional<double> logit_softcap) {
  RecordFunction record("linear_cross_entropy", x, weight, targets);
  if (auto cast = autocast_inputs("linear_cross_entropy", {x, weight})) {
    return linear_cross_entropy_chunked((*cast)[0], (*cast)[1], targets, ignore_index, chunk_rows,
                                        target_count, logit_softcap);
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
  if (chunk_rows < 0) throw ValueError(str_cat(op, ": chunk_rows ", chunk_rows, " must be >= 0"));
  if (logit_softcap && !(*logit_softcap > 0.0)) {
    throw ValueError(str_cat(op, ": logit_softcap ", *logit_softcap, " must be positive"));
  }
  check_targets(op, "x", x, targets);
  const int64_t dim = weight.size(1);
  const int64_t rows = dim == 0 ? targets.numel() : x.numel() / dim;
  auto node = make_function_node("LinearCrossEntropyBackward0", {x, weight});
  const LossAndGrads result =
      chunked_loss_and_grads(node.get(), x, weight, targets.contiguous(), ignore_index, chunk_rows,
                             rows, target_count, static_cast<float>(logit_softcap.value_or(0.0)));
  save_linear_cross_entropy_grads(node, result.dx, result.dweight, result.out);
  return result.out;
}

}  // namespace headroom
