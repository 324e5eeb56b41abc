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
  // a dtype (f32, bf16 or f16; f32 runs without TF32); c is f32 or their dtype; bias is f32 or c's
  // dtype. A workspace, when needed, comes from the device's caching allocator.
  void (*gemm)(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, float alpha,
               float beta, const Tensor& c, GemmEpilogue epilogue, const Tensor& bias) = nullptr;

  // ---- attention: q [B, Hq, T, D], k / v [B, Hkv, S, D] (any strides, unit stride in D), one
  // dtype; out contiguous in q's dtype; lse f32 [B, Hq, T]. Hq is a multiple of Hkv (GQA).
  void (*attention_forward)(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                            float scale, DropoutParams dropout, const Tensor& out,
                            const Tensor& lse) = nullptr;
  // delta: f32 [B, Hq, T] workspace; grad_q / grad_k / grad_v contiguous in q's dtype;
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
  // Sum of |x|^p (p > 0, finite) or max |x| (p = inf) over all of x, added into slot
  // `index` of `partials` (f32 [count]) without a host read.
  void (*norm_partial)(const Tensor& x, double p, const Tensor& partials, int64_t index) = nullptr;
  // grads (f32 / bf16 / f16) multiplied by inv_scale in place; found_inf (f32 [1]) set to 1 when
  // any element is inf or NaN. No host read.
  void (*unscale_and_check)(const Tensor& grad, float inv_scale, const Tensor& found_inf) = nullptr;
  // (Lion, SGD, Adafactor and LOMO entries follow here.)
};

// Fills the table of `type` at start-up: each kernel file sets its own entries.
DeviceOps& mutable_device_ops(DeviceType type);

// The table of `type`, or null when no backend registered any entry for it.
const DeviceOps* find_device_ops(DeviceType type);

}  // namespace headroom
