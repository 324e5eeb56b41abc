// Gradient clipping as torch.nn.utils does it (clip_grad_norm_, clip_grad_value_) for HF's
// max_grad_norm, and the gradient norm the Trainer logs.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace headroom {

// Note [Gradient norms in fp32]
// The norm over all gradients is the norm of the per-tensor norms, as in torch: each tensor's
// p-norm is accumulated in double from the fp32 values of its elements and rounded to fp32,
// and the norm of those fp32 norms is rounded to fp32 again; that fp32 value is returned as a
// double. For fp32 gradients this is torch's result to within fp32 rounding. For bf16 and f16
// gradients headroom still keeps every norm in fp32, where torch 1.13 rounds each norm to the
// gradient's dtype: the scaling factor then comes from the fp32 norm, and each scaled gradient
// element is computed in fp32 and rounded once into its dtype.
//
// Only parameters whose grad is defined count (torch's `p.grad is not None`). Gradients must be
// f32, bf16 or f16 (NotImplementedError naming the parameter's index and dtype) and on one device
// (ValueError). On the meta device nothing is computed: the norm returned is 0 and no gradient
// changes, while the checks above still run; on a device without these kernels
// NotImplementedError names it. No autograd history is recorded.

// torch.nn.utils.clip_grad_norm_: computes the total norm (See Note [Gradient norms in fp32]),
// then multiplies every gradient in place by min(1, max_norm / (total_norm + 1e-6)), with torch's
// fp32 arithmetic; when that factor is exactly 1 the gradients are left as they are, which is
// the same result. Returns the total norm, before clipping. norm_type is p > 0 or
// +infinity (the largest |element|); max_norm >= 0 (ValueError otherwise; torch also allows
// p = 0, a count of non-zero elements, which headroom does not). With error_if_nonfinite, a NaN
// or infinite total norm throws Error naming the norm's order and value, and no gradient changes;
// without it the gradients are scaled by the non-finite factor, as torch does.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
// The same over every parameter of every group of `optimizer`.
double clip_grad_norm_(const Optimizer& optimizer, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
// clip_grad_norm_ without error_if_nonfinite, whose total norm stays on the device, unread (no
// host sync): element 0 of the f32 [2] returned (element 1: the clip factor); undefined when no
// parameter has a gradient.
Tensor clip_grad_norm_on_device(const Optimizer& optimizer, double max_norm,
                                double norm_type = 2.0);
// The same over `params`, in their order (the Trainer's: the model's, as HF Trainer clips
// model.parameters()).
Tensor clip_grad_norm_on_device(const std::vector<Tensor>& params, double max_norm,
                                double norm_type = 2.0);

// Note [Gradient norms over ranks]
// Under ZeRO each rank holds its share's gradients, and the clip must still be one process's to
// the bit: a norm of the shares' norms rounds differently from Note [Gradient norms in fp32]'s
// fold over the parameters in order, and an ulp there moves the weights (bf16 copies of a weight
// next to a rounding boundary flip, and AdamW carries that to near-zero gradients). So each rank
// writes its gradients' partial sums at their parameters' rows of one table of the whole
// model's (grad_norm_table, the other rows 0), the ranks sum the tables as 64-bit integers —
// the doubles' bits, to which every other rank adds 0, so each row arrives exactly as its owner
// wrote it — and every rank folds that table as one process folds its own
// (clip_grad_norm_by_table), then scales its own gradients. A parameter no rank has a gradient
// for is a row of zeros, which adds 0 to the fold (exact on the CPU; CUDA's warps take other
// rows then, so there it is within rounding).

// The table's rows: `count` of kNormPartialBlocks 8-byte slots (i64) on `device`, the defined
// gradient of params[i] at row rows[i] (rows increasing), the others 0.
Tensor grad_norm_table(const std::vector<Tensor>& params, const std::vector<int64_t>& rows,
                       int64_t count, Device device, double norm_type = 2.0);
// clip_grad_norm_on_device from an assembled table: its total norm and clip factor (f32 [2] on
// the table's device, as clip_grad_norm_on_device's), the gradients of `params` scaled by it.
Tensor clip_grad_norm_by_table(const Tensor& table, const std::vector<Tensor>& params,
                               double max_norm, double norm_type = 2.0);

// torch.nn.utils.clip_grad_value_: clamps every gradient element to [-clip_value, clip_value]
// in place (NaN stays NaN). clip_value >= 0, else ValueError.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);
void clip_grad_value_(const Optimizer& optimizer, double clip_value);

// The total gradient norm that clip_grad_norm_ would return, without changing any gradient (for
// logging `grad_norm` as HF Trainer does).
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);
double grad_norm(const Optimizer& optimizer, double norm_type = 2.0);

}  // namespace headroom
