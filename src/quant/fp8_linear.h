// The FP8 linear of Transformer Engine's te.Linear: y = x @ W^T + b with x and W quantized to
// E4M3 and the output gradient to E5M2 (HYBRID) or E4M3, scaled per tensor (delayed, current) or
// per block (MXFP8, Float8BlockScaling) as the recipe says (amp/fp8_recipe.h); the state each
// layer keeps (scales, amax histories, its weight quantized once per optimizer step); and
// Fp8Training, which holds every layer's state and updates delayed scales where TE does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amp/fp8_recipe.h"
#include "ops/linear.h"
#include "quant/fp8_tensor.h"

namespace headroom {

// Note [FP8 linear]
// Forward: x (as [rows, in]) and W (as [out, in]; a Conv1D [in, out] weight is transposed first)
// are quantized, y = dequant(x) @ dequant(W)^T + b is one GEMM. Per-tensor recipes with in, out
// multiples of 16 run the gemm table's FP8 entry (cuBLASLt on CUDA, an exact fp32 product of the
// widened FP8 values on the CPU); the rest (block recipes, which Hopper has no GEMM for, and
// small shapes) dequantize both operands to the compute dtype and run the ordinary gemm. The
// output is in the compute dtype: autocast's when on, else x's.
// Saved for backward: the FP8 input (its data and scales), or with save_original_input x itself,
// quantized again in backward with the forward's scale; and the FP8 weight, shared with the
// layer's cache. Backward quantizes the output gradient and computes dx = g @ W and dW = g^T @ x
// from FP8 operands as the forward does (TN transposes of per-tensor FP8 operands are byte
// copies), db = the column sums of g in high precision.
// Weight caching (TE's is_first_microbatch): a weight is quantized once per optimizer step
// (Fp8Training::next_step) and reused by every micro-batch and by recomputes.
// Delayed scaling: each quantization records its amax into slot 0 of its history; end_forward
// updates the forward slots (input, weight) and end_backward the output gradient's, as TE's
// autocast exit and backward hook do, so a step quantizes with scales from earlier steps. A
// recompute in backward (activation checkpointing) quantizes with the scale its forward used and
// records nothing, as TE's recompute restores the forward's FP8 meta. Outside autograd
// (evaluation between steps, generation) a layer leaves its training state alone: it records no
// amax and no counts, and a weight not yet quantized this step is quantized for the call only, so
// evaluating changes neither the next step's scales nor what it allocates (and a plan that
// evaluates once at the end predicts a run that evaluates every step).

// Why a quantization runs, which decides its scale and what it records.
enum class Fp8Pass : uint8_t {
  train,      // the current scale; records the amax (delayed) and the counts
  recompute,  // the scale of the forward being recomputed; records nothing
  evaluate,   // the current scale; records nothing
};

// What every layer's state shares: the recipe, the options, the optimizer step.
struct Fp8Context {
  Fp8Recipe recipe;
  bool save_original_input = false;
  int64_t step = 0;
};

// One layer's FP8 state, on the layer's device.
class Fp8LinearState {
 public:
  Fp8LinearState(std::shared_ptr<const Fp8Context> context, Device device);

  const Fp8Context& context() const { return *context_; }
  Device device() const { return counts_.device(); }

  // x as `role` quantizes it (x contiguous, viewed as [rows, last dimension]) in `pass`.
  Fp8Tensor quantize(const Tensor& x, Fp8Role role, Fp8Pass pass);
  // The weight as [out, in] FP8: the copy of the current optimizer step, quantized and kept on
  // its first use in training; under Fp8Pass::evaluate, before that, a copy for the call only.
  Fp8Tensor weight(const Tensor& weight, WeightLayout layout, Fp8Pass pass = Fp8Pass::train);

  // Delayed scaling's updates (no-ops for the other recipes).
  void end_forward();
  void end_backward();

  // Values that overflowed (clamped to +-max) and underflowed (nonzero to zero) since the last
  // call, zeroed after reading; zeros on the meta device.
  std::pair<int64_t, int64_t> take_counts();

  // Delayed and current scaling's scales, f32: [2] forward (input, weight), [1] backward.
  const Tensor& forward_scale() const { return forward_scale_; }
  const Tensor& backward_scale() const { return backward_scale_; }

  // What a resumed run needs to continue as this one would (delayed scaling's amax histories,
  // scales and their inverses; the other recipes keep nothing between steps), by name: the
  // tensors themselves.
  std::vector<std::pair<std::string, Tensor>> resume_state() const;

  // Bytes of the state's own tensors and of the cached FP8 weight (the planner reports them).
  int64_t state_bytes() const;
  int64_t weight_cache_bytes() const { return weight_.defined() ? weight_.bytes() : 0; }

 private:
  std::shared_ptr<const Fp8Context> context_;
  bool delayed_ = false;
  // Delayed scaling: forward slots (0 input, 1 weight) and the backward slot (0 output gradient):
  // history [slots, len], scaled_max, scale, scale_inv [slots]; forward_scale_used_, the scales
  // the last forward quantized with (for recomputes). Current scaling uses scale and history
  // (length 1) as its scratch for the scale and the amax it computes.
  Tensor forward_history_, forward_scaled_max_, forward_scale_, forward_scale_inv_;
  Tensor forward_scale_used_;
  Tensor backward_history_, backward_scaled_max_, backward_scale_, backward_scale_inv_;
  Tensor scratch_amax_;  // what a recompute records into, never read
  Tensor counts_;        // i64 [2]
  Fp8Tensor weight_;
  int64_t weight_step_ = -1;
  const void* weight_data_ = nullptr;
};

// TE's fp8_autocast and FP8GlobalStateManager for one model: makes the layers' states and runs
// delayed scaling's updates over all of them.
class Fp8Training {
 public:
  explicit Fp8Training(const Fp8Recipe& recipe, bool save_original_input = false);

  const Fp8Recipe& recipe() const { return context_->recipe; }
  bool save_original_input() const { return context_->save_original_input; }

  // A new layer's state on `device`, kept here for the updates.
  std::shared_ptr<Fp8LinearState> new_layer(Device device);
  const std::vector<std::shared_ptr<Fp8LinearState>>& layers() const { return layers_; }

  // When a forward ends / a backward ends (delayed scaling updates scales).
  void end_forward();
  void end_backward();
  // After the optimizer step: weights are quantized again on their next use.
  void next_step();
  // Overflow and underflow counts of every layer since the last call.
  std::pair<int64_t, int64_t> take_counts();

  // Every layer's resume_state(), named layers.I.NAME (I in creation order), on the CPU, and the
  // metadata that names the recipe and the layer count; a checkpoint keeps both (TE keeps its
  // FP8 meta in each module's _extra_state).
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  std::map<std::string, std::string> state_metadata() const;
  // Restores a state_dict() saved with state_metadata(), checked whole before anything is
  // copied: ValueError naming fp8_recipe (both recipes, the history length among them) or the
  // layer count when the run differs, or the tensor that is missing or of another shape.
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata);

 private:
  std::shared_ptr<Fp8Context> context_;
  std::vector<std::shared_ptr<Fp8LinearState>> layers_;
};

// x [..., in] -> [..., out] through FP8 (Note [FP8 linear]); weight and bias as linear() takes
// them. ValueError naming the argument for mismatched shapes or devices.
// The state is shared with the backward node, which outlives a caller's reference.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, WeightLayout layout,
                  const std::shared_ptr<Fp8LinearState>& state);

}  // namespace headroom
