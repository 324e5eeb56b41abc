// The op kernels of a device that computes in the tensors' own dtypes (CUDA): one table of
// Tensor-level entries per device type, filled by the backend's kernel files at start-up. The
// CPU is not in it: its kernels take fp32 pointers and its ops widen low-precision inputs first
// (ops/op_support.h); a device here reads bf16 / f16 directly, accumulates in fp32 and rounds its
// result once, so it matches the CPU reference to one rounding without the fp32 copies.
//
// Every buffer an entry needs (outputs, saved statistics, workspaces) is allocated by the op with
// Tensor::empty and passed in, never allocated inside a kernel: the meta device then sees the same
// allocations (Note [Native allocation pattern] in ops/op_support.h). Unless an entry says
// otherwise, tensors are contiguous, on the table's device, floating inputs may be f32 / bf16 /
// f16 (mixed), outputs are written in their own dtype, and "undefined" means the caller wants no
// such result. Entries return before the kernels finish (stream order), except those that say
// they read back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/adamw.h"
#include "backend/cpu/adamw_8bit.h"
#include "core/device.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace headroom {

enum class BinaryOp { add, sub, mul };

// Attention dropout: the same Philox stream as the CPU kernel (backend/cpu/attention.h).
struct DropoutParams {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// What a GEMM adds to alpha * op(a) @ op(b) + beta * c before it stores c.
enum class GemmEpilogue { none, bias, bias_gelu };

// The partial sums sum_all needs for n elements: none up to kSumAllOneBlock (one block sums them
// all), else one per block of a fixed grid of kSumAllPartials, so the order of the additions, and
// with it the result, does not depend on the GPU. The op allocates them: a dry run sees them too.
inline constexpr int64_t kSumAllOneBlock = int64_t{1} << 16;
inline constexpr int64_t kSumAllPartials = 512;
inline int64_t sum_all_partials(int64_t n) { return n <= kSumAllOneBlock ? 0 : kSumAllPartials; }

struct DeviceOps {
  // ---- point-wise: activations (computed in fp32; gelu is the tanh approximation, as on CPU)
  void (*gelu_forward)(const Tensor& x, const Tensor& out) = nullptr;
  void (*gelu_backward)(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in) = nullptr;
  void (*silu_forward)(const Tensor& x, const Tensor& out) = nullptr;
  void (*silu_backward)(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in) = nullptr;
  void (*swiglu_forward)(const Tensor& gate, const Tensor& up, const Tensor& out) = nullptr;
  // grad_gate / grad_up may each be undefined.
  void (*swiglu_backward)(const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                          const Tensor& grad_gate, const Tensor& grad_up) = nullptr;

  // ---- point-wise: arithmetic and reductions
  // out = a op b; a and b have out's shape with any strides (zero strides from broadcasting).
  void (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = nullptr;
  // out = x * factor; out may be x itself.
  void (*scale)(const Tensor& x, float factor, const Tensor& out) = nullptr;
  // out (0-d) = factor * sum(x), summed in fp64 in a fixed order. partial: the workspace of
  // sum_all_partials(x.numel()) fp64 sums (in an i64 tensor's bytes: there is no f64 dtype), or
  // undefined when that is 0.
  void (*sum_all)(const Tensor& x, double factor, const Tensor& partial,
                  const Tensor& out) = nullptr;
  // out[o, i] = factor * sum_j x[o, j, i] for x [outer, n, inner].
  void (*sum_middle)(const Tensor& x, int64_t outer, int64_t n, int64_t inner, double factor,
                     const Tensor& out) = nullptr;
  // Every element of dst = factor * scalar, where scalar is a 0-d tensor read on the device (the
  // backward of a full reduction, with no host read of the incoming gradient).
  void (*fill_scaled)(const Tensor& dst, const Tensor& scalar, double factor) = nullptr;
  // softmax over the middle dimension of [outer, n, inner].
  void (*softmax_forward)(const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                          const Tensor& out) = nullptr;
  void (*softmax_backward)(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n,
                           int64_t inner, const Tensor& grad_x) = nullptr;
  // out = keep ? x * scale : 0 with keep decided as cpu::dropout_apply does (24-bit word of the
  // Philox stream at seed / offset + element index >= threshold).
  void (*dropout)(const Tensor& x, uint64_t seed, uint64_t offset, uint32_t threshold,
                  float scale, const Tensor& out) = nullptr;
  // Rotary embedding of x [B, H, T, D] (any strides) into out (contiguous), with the CPU's
  // cos / sin table values (cpu::rotary_table) computed in the kernel; `inverse` rotates back.
  void (*rotary)(const Tensor& x, double theta, int64_t position_offset, bool inverse,
                 const Tensor& out) = nullptr;

  // ---- embedding (ids i32 or i64)
  // The flat index of the first id outside [0, num_embeddings), or -1. Reads back (one sync).
  int64_t (*first_bad_id)(const Tensor& ids, int64_t num_embeddings) = nullptr;
  // out[i] = weight[ids[i]] in weight's dtype (out has weight's dtype).
  void (*embedding_forward)(const Tensor& weight, const Tensor& ids, const Tensor& out) = nullptr;
  // grad_weight (f32, [num_embeddings, dim]) = scatter-add of grad_out's rows; the entry zeroes it.
  void (*embedding_backward)(const Tensor& grad_out, const Tensor& ids,
                             const Tensor& grad_weight) = nullptr;

  // ---- normalisation over the last dimension (statistics f32, one per row)
  // Row blocks of the backward's partial weight / bias sums: partial is
  // [norm_backward_blocks(rows), 2, dim] f32. A function of rows only, so that results repeat on
  // every GPU and the meta device can plan the partials.
  int64_t (*norm_backward_blocks)(int64_t rows) = nullptr;
  void (*layer_norm_forward)(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                             const Tensor& out, const Tensor& mean, const Tensor& rstd) = nullptr;
  // dweight / dbias are f32; dx in its own dtype.
  void (*layer_norm_backward)(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                              const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                              const Tensor& dweight, const Tensor& dbias,
                              const Tensor& partial) = nullptr;
  void (*rms_norm_forward)(const Tensor& x, const Tensor& weight, float eps, const Tensor& out,
                           const Tensor& rstd) = nullptr;
  void (*rms_norm_backward)(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                            const Tensor& partial) = nullptr;

  // ---- cross-entropy: logits [rows, vocab] (rows contiguous, any row stride), targets i32 / i64
  // [rows] contiguous.
  // Targets that are not ignore_index; first_bad gets the flat index of the first target outside
  // [0, vocab) that is not ignore_index, or -1. Reads back (one sync).
  int64_t (*count_targets)(const Tensor& targets, int64_t vocab, int64_t ignore_index,
                           int64_t* first_bad) = nullptr;
  // lse[r] = logsumexp(logits[r]) and row_loss[r] = lse[r] - logits[r, target[r]], 0 for an
  // ignored row (both f32 [rows]); mean_loss sums row_loss, so no float atomics are needed.
  void (*cross_entropy_forward)(const Tensor& logits, const Tensor& targets,
                                int64_t ignore_index, const Tensor& lse,
                                const Tensor& row_loss) = nullptr;
  // grad_logits = (softmax(logits) - onehot(target)) * scale * g, zero for ignored rows, where
  // g is grad_scale (a 0-d tensor read on the device) or 1 when it is undefined. grad_logits may
  // be logits itself (in place).
  void (*cross_entropy_backward)(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                 int64_t ignore_index, float scale, const Tensor& grad_scale,
                                 const Tensor& grad_logits) = nullptr;
  // out (0-d f32) = sum(row_loss) / count, summed in fp64 in a fixed order; NaN when count is 0.
  void (*mean_loss)(const Tensor& row_loss, int64_t count, const Tensor& out) = nullptr;
  // out = x * scalar, where scalar is a 0-d tensor read on the device (the incoming gradient of
  // linear_cross_entropy's loss, without a host read); out may be x itself.
  void (*scale_by_scalar)(const Tensor& x, const Tensor& scalar, const Tensor& out) = nullptr;

  // ---- GEMM (cuBLASLt)
  // c = alpha * op(a) @ op(b) + beta * c, then the epilogue (bias: + bias[col], bias_gelu: gelu
  // of that). a, b, c are 2-D, or 3-D with a leading batch dimension (a or b may have batch
  // stride 0); each has a unit stride in its last dimension and any leading stride. a and b share
  // a dtype (f32, bf16 or f16; f32 runs without TF32); c is f32 or their dtype; bias is in c's
  // dtype. A workspace, when needed, comes from the device's caching allocator.
  void (*gemm)(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, float alpha,
               float beta, const Tensor& c, GemmEpilogue epilogue, const Tensor& bias) = nullptr;

  // ---- attention: q [B, Hq, T, D], k / v [B, Hkv, S, D] (any strides, unit stride in D), one
  // dtype; out contiguous in q's dtype; lse f32 [B, Hq, T]. Hq is a multiple of Hkv (GQA).
  void (*attention_forward)(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                            float scale, DropoutParams dropout, const Tensor& out,
                            const Tensor& lse) = nullptr;
  // out (forward's) and grad_out contiguous in q's dtype; lse as forward's; delta: f32
  // [B, Hq, T] workspace; grad_q / grad_k / grad_v contiguous in q's dtype;
  // grad_q_accum: f32 [B, Hq, T, D] workspace when q is not f32, else undefined.
  void (*attention_backward)(const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                             bool causal, float scale, DropoutParams dropout, const Tensor& delta,
                             const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                             const Tensor& grad_q_accum) = nullptr;

  // ---- optimizers and gradient checks (entries added with their kernels)
  // AdamW on one parameter: param in its dtype, grad any floating dtype, states f32 or bf16
  // (compensation: bf16 Kahan buffer or undefined; stochastic: round a bf16 param
  // stochastically with rng).
  void (*adamw_update)(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                       const Tensor& exp_avg_sq, const Tensor& compensation, bool stochastic,
                       PhiloxState rng, const cpu::AdamWCoefficients& c) = nullptr;
  // bitsandbytes' Adam with f32 states (state1 / state2 f32) or 8-bit blockwise states (u8 with
  // absmax f32 per kAdam8bitBlockSize block); param f32.
  void (*bnb_adam32_update)(const Tensor& param, const Tensor& grad, const Tensor& state1,
                            const Tensor& state2, const cpu::BnbAdamCoefficients& c) = nullptr;
  void (*bnb_adam8bit_update)(const Tensor& param, const Tensor& grad, const Tensor& state1,
                              const Tensor& state2, const Tensor& absmax1, const Tensor& absmax2,
                              const cpu::BnbAdamCoefficients& c) = nullptr;
  // Partial sums of |x|^p (p > 0, finite; |x|^2 and |x| exactly, other p through pow) or partial
  // maxima of |x| (p = inf; NaN wins), in double from x's fp32 values, written to row `index`
  // of `partials` (i64 [count, kNormPartialBlocks], each slot a double's bits: the dtype table
  // has no f64). Every slot of the row is written, in a fixed order, so results repeat bit for
  // bit. No host read.
  void (*norm_partial)(const Tensor& x, double p, const Tensor& partials, int64_t index) = nullptr;
  // grads (f32 / bf16 / f16) multiplied by inv_scale in place; found_inf (f32 [1]) set to 1 when
  // any element is inf or NaN. No host read.
  void (*unscale_and_check)(const Tensor& grad, float inv_scale, const Tensor& found_inf) = nullptr;
  // Columns of norm_partial's partials: a fixed grid, so that partial sums keep their order.
  static constexpr int64_t kNormPartialBlocks = 256;
  // How norm_combine turns the total norm into the gradients' factor (both fp32, as torch):
  // clip_grad_norm_'s min(1, (1 / (total + 1e-6)) * max_norm) (a NaN total gives NaN), or
  // LOMO's min(1, max_norm / (total + 1e-6)).
  enum class ClipRule { torch, lomo };
  // From the rows of norm_partial (its partials): each tensor's norm rounded to
  // f32 as cpu::vector_norm does, then the norm of those norms (Note [Gradient norms in fp32]),
  // into result[0] (f32 [2]), and the clip factor of `rule` for max_norm into result[1]. No host
  // read.
  void (*norm_combine)(const Tensor& partials, int64_t count, double p, double max_norm,
                       ClipRule rule, const Tensor& result) = nullptr;
  // grad (f32 / bf16 / f16) multiplied in place by factor[1] (norm_combine's result, read on the
  // device) in fp32 and rounded once; nothing is written when the factor is exactly 1.
  void (*scale_by_device_factor)(const Tensor& grad, const Tensor& factor) = nullptr;

  // Lion (Note [Lion update]): param in its dtype (rounded to nearest when not f32), grad any
  // floating dtype, exp_avg f32.
  struct LionCoefficients {
    float decay;  // 1 - lr * weight_decay
    float lr;
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
  };
  void (*lion_update)(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                      const LionCoefficients& c) = nullptr;
  // torch's SGD: param in its dtype (rounded to nearest when not f32), grad any floating dtype;
  // momentum_buffer f32, or undefined without momentum; `first`: the buffer becomes the decayed
  // gradient itself (torch.clone(d_p)).
  struct SgdCoefficients {
    float neg_lr;
    float weight_decay;
    float momentum;
    float one_minus_dampening;
    bool nesterov;
  };
  void (*sgd_update)(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                     bool first, const SgdCoefficients& c) = nullptr;
  // Adafactor (Note [Adafactor step]) on one parameter: param f32 / bf16 (rounded to nearest),
  // grad any floating dtype, f32 states. Factored (param [batch, rows, cols] viewed so): row
  // [batch, rows], col [batch, cols], col_factor f32 [batch, cols] workspace; else exp_avg_sq of
  // the parameter's shape (row / col / col_factor undefined). exp_avg f32 or undefined (no beta1).
  // scalars: i64 [adafactor_scalars(batch)] workspace of doubles' bits (as norm_partial's);
  // slots kAdafactorRms and kAdafactorRms + 1 end as the parameter's RMS before the step and
  // lr_t, computed on the device from the coefficients, so no host read is needed.
  static constexpr int64_t kAdafactorRms = 2 * kNormPartialBlocks;
  static constexpr int64_t adafactor_scalars(int64_t batch) { return kAdafactorRms + 3 + batch; }
  struct AdafactorCoefficients {
    float beta2t, one_minus_beta2t;
    float eps1;
    float clip_threshold;
    double rho;   // lr, or the relative step
    double eps2;  // floor of the RMS in lr_t
    bool scale_parameter;
    double weight_decay;
    bool first_moment;
    float beta1, one_minus_beta1;
  };
  void (*adafactor_update)(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, const Tensor& row, const Tensor& col,
                           const Tensor& col_factor, int64_t batch, int64_t rows, int64_t cols,
                           const Tensor& scalars, const AdafactorCoefficients& c) = nullptr;
  // LOMO's fused update (Lomo.fuse_update): param f32 / bf16 (rounded to nearest), grad any
  // floating dtype; clip_factor: norm_combine's result, whose element 1 (the clip factor) is
  // read on the device, or undefined for no norm clipping.
  struct LomoCoefficients {
    float lr;
    bool decay;
    float decay_factor;  // 1 - lr * weight_decay
    bool clip_value;
    float clip_grad_value;
  };
  void (*lomo_update)(const Tensor& param, const Tensor& grad, const Tensor& clip_factor,
                      const LomoCoefficients& c) = nullptr;
};

// Fills the table of `type` at start-up: each kernel file sets its own entries.
DeviceOps& mutable_device_ops(DeviceType type);

// The table of `type`, or null when no backend registered any entry for it.
const DeviceOps* find_device_ops(DeviceType type);

// The names of the table's entries that are still null ("entry 12" etc. by position: the table
// has no reflection); empty when every op has a kernel.
std::vector<std::string> missing_device_ops(const DeviceOps& ops);

}  // namespace headroom
