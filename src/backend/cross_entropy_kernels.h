// The cross-entropy's kernel table (Note [Kernel tables] in backend/kernel_table.h): logits [rows,
// vocab] (rows contiguous, any row stride), targets i32 / i64 [rows] contiguous.
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct CrossEntropyKernels {
  static constexpr const char* kName = "cross_entropy";

  // Targets that are not ignore_index; first_bad gets the flat index of the first target outside
  // [0, vocab) that is not ignore_index, or -1. Reads back (one sync).
  Kernel<int64_t(const Tensor& targets, int64_t vocab, int64_t ignore_index, int64_t* first_bad)>
      count_targets{"count_targets"};
  // lse[r] = logsumexp(logits[r]) and row_loss[r] = lse[r] - logits[r, target[r]], 0 for an ignored
  // row (both f32 [rows]); mean_loss sums row_loss, so no float atomics are needed.
  Kernel<void(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& lse,
              const Tensor& row_loss)>
      forward{"forward"};
  // grad_logits = (softmax(logits) - onehot(target)) * scale * g, zero for ignored rows, where g is
  // grad_scale (a 0-d tensor read on the device) or 1 when it is undefined. grad_logits may be
  // logits itself (in place). softcap c > 0: the logits are capped ones, l = c * tanh(z / c), and
  // the gradient is carried to z, times 1 - (l / c)^2 (Gemma 2's final logit soft-capping); 0:
  // none.
  Kernel<void(const Tensor& logits, const Tensor& lse, const Tensor& targets, int64_t ignore_index,
              float scale, float softcap, const Tensor& grad_scale, const Tensor& grad_logits)>
      backward{"backward"};
  // out (0-d f32) = sum(row_loss) / count, summed in fp64 in a fixed order; NaN when count is 0.
  Kernel<void(const Tensor& row_loss, int64_t count, const Tensor& out)> mean_loss{"mean_loss"};
  // out = x * scalar, where scalar is a 0-d tensor read on the device (the incoming gradient of
  // linear_cross_entropy's loss, without a host read); out may be x itself.
  Kernel<void(const Tensor& x, const Tensor& scalar, const Tensor& out)> scale_by_scalar{
      "scale_by_scalar"};
};

// Logits (or their gradient) as an entry reads them: rows of vocab elements, `stride` apart.
struct LogitRows {
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t stride = 0;
};

// What every backend's entries require of their arguments, checked once for all; ValueError
// naming the entry and the argument otherwise. `op` names the entry in the message.
LogitRows check_cross_entropy_forward(const char* op, const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& row_loss);
// Returns the rows of logits; grad_logits has their shape (its own row stride).
LogitRows check_cross_entropy_backward(const char* op, const Tensor& logits, const Tensor& lse,
                                       const Tensor& targets, const Tensor& grad_scale,
                                       const Tensor& grad_logits);
void check_mean_loss(const Tensor& row_loss, const Tensor& out);
void check_scale_by_scalar(const Tensor& x, const Tensor& scalar, const Tensor& out);

}  // namespace headroom
