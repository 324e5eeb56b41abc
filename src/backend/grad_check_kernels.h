// The gradient checks' kernel table (Note [Kernel tables] in backend/kernel_table.h): norms for
// clipping and LOMO, clamping for clip_grad_value_, and the GradScaler's unscale-and-check, all
// without a host read, each over a list of tensors in one launch. Gradients are contiguous, in
// their own dtype, and changed in place.
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// Columns of norm_partial's partials: a fixed grid, so that partial sums keep their order.
inline constexpr int64_t kNormPartialBlocks = 256;

// How norm_combine turns the total norm into the gradients' factor (both fp32, as torch):
// clip_grad_norm_'s min(1, (1 / (total + 1e-6)) * max_norm) (a NaN total gives NaN), or LOMO's
// min(1, max_norm / (total + 1e-6)).
enum class ClipRule { torch, lomo };

struct GradCheckKernels {
  static constexpr const char* kName = "grad_check";

  // Each entry takes a list of tensors and launches once for all of them (Note [Tensor lists]
  // in backend/kernel_table.h); the tensors may differ in dtype.

  // Partial sums of |x|^p (p > 0, finite; |x|^2 and |x| exactly, other p through pow) or partial
  // maxima of |x| (p = inf; NaN wins), in double from each x's fp32 values, written to row
  // `first_row + i` of `partials` for xs[i] (i64 [rows, kNormPartialBlocks], each slot a double's
  // bits: the dtype table has no f64). Every slot of a row is written, in a fixed order, so
  // results repeat bit for bit.
  Kernel<void(TensorList xs, double p, const Tensor& partials, int64_t first_row)> norm_partial{
      "norm_partial"};
  // From the rows of norm_partial (its partials): each tensor's norm rounded to f32, then the norm
  // of those norms (Note [Gradient norms in fp32]), into result[0] (f32 [2]), and the clip factor
  // of `rule` for max_norm into result[1].
  Kernel<void(const Tensor& partials, int64_t count, double p, double max_norm, ClipRule rule,
              const Tensor& result)>
      norm_combine{"norm_combine"};
  // Each grad (f32 / bf16 / f16) multiplied in place by factor[1] (norm_combine's result, read on
  // the device) in fp32 and rounded once; nothing is written when the factor is exactly 1.
  Kernel<void(TensorList grads, const Tensor& factor)> scale_by_device_factor{
      "scale_by_device_factor"};
  // Each grad (f32 / bf16 / f16) clamped in place to [low, high] in fp32 and rounded once; NaN
  // stays NaN (torch.clamp_).
  Kernel<void(TensorList grads, float low, float high)> clamp{"clamp"};
  // Each grad (f32 / bf16 / f16) multiplied by inv_scale in place; found_inf (f32 [1]) set to 1
  // when any element of any of them is inf or NaN.
  Kernel<void(TensorList grads, float inv_scale, const Tensor& found_inf)> unscale_and_check{
      "unscale_and_check"};
};

}  // namespace headroom
