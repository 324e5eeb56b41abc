// Loss scaling for fp16 training, as torch.amp.GradScaler: the loss is multiplied by a scale so
// that small gradients survive fp16, gradients are divided by it before the optimizer sees them,
// steps whose gradients hold inf or NaN are skipped, and the scale adapts. Megatron-LM's
// hysteresis and floor, and a static scale, are options.
#pragma once

#include <cstdint>
#include <unordered_map>

#include <nlohmann/json_fwd.hpp>

#include "core/tensor.h"

namespace headroom {

class Optimizer;  // optim/optimizer.h

// Note [Loss scaling and skipped steps]
// One iteration is: backward(scaler.scale(loss)) (once per micro-batch when accumulating; every
// micro-batch sees the same scale, as update() runs only after the step), then for each optimizer
// optionally scaler.unscale_(opt) (gradient clipping and anything else that reads gradient values
// goes after it), scaler.step(opt), and once at the end scaler.update().
// - unscale_ leaves the gradients unscaled even when they hold inf / NaN; they are then not to be
//   used, and step() does not call the optimizer.
// - A skipped step leaves the optimizer untouched: parameters, moments and step counts stay. An LR
//   scheduler stepped regardless advances (as in torch); step()'s result says which steps were
//   skipped.
// - The scale and its trackers change only in update(), which needs every optimizer of the
//   iteration to have been unscaled (by unscale_ or step) since the last update().

// torch.amp.GradScaler's options and defaults, then headroom's additions, whose defaults give
// torch's behaviour exactly.
//
// Where we differ from torch, and why:
// - hysteresis and min_scale come from Megatron-LM's DynamicGradScaler (megatron/core/optimizer/
//   grad_scaler.py), for runs that should ride out an isolated overflow. We follow its code,
//   which is not what its docstring says: overflows need not be consecutive. Each overflow counts
//   the hysteresis tracker down (it is not reset by a clean step, only when the scale grows), and
//   once it is at 0 or below, this and every later overflow backs the scale off, to no less than
//   min_scale. Every overflow resets the growth tracker and skips its step, as in Megatron.
//   Unlike Megatron, the scale is multiplied as torch does (the product in double, then rounded
//   to fp32; Megatron multiplies two fp32 tensors; the same for factors 2 and 0.5), and growth
//   that would reach inf is not taken (torch >= 2.1; Megatron grows to inf).
// - dynamic = false is a static loss scale (Megatron's ConstantGradScaler, Apex / DeepSpeed's
//   fixed loss_scale): init_scale forever, steps with inf / NaN still skipped. update(new_scale)
//   still sets it.
// - torch refuses fp16 gradients in unscale_ ("Attempting to unscale FP16 gradients.": with fp16
//   parameters, the unscaled gradients underflow and the update happens in fp16). We refuse them
//   too unless allow_fp16_grads. bf16 gradients are accepted, as torch's CPU kernel takes them.
// - scale(loss) keeps the loss's shape (current torch, whose scale is 0-dim; 1.13's was [1]).
// - get_scale() is the fp32 scale also before the first scale(), where torch returns init_scale
//   unrounded.
// - Not offered: scaling a list of outputs, sparse gradients, closures, optimizers that unscale
//   themselves (_step_supports_amp_scaling), set_growth_factor and the other setters.
struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16; kept as fp32, like every value of the scale
  double growth_factor = 2.0;   // must be > 1
  double backoff_factor = 0.5;  // must be < 1
  int64_t growth_interval = 2000;
  // false: scale() returns the loss, step() just steps, the rest does nothing (torch's `enabled`).
  bool enabled = true;
  // The scale backs off from the hysteresis-th overflow since it last grew on (Megatron's default
  // is 2); 1 is torch, every overflow.
  int64_t hysteresis = 1;
  // The floor of a backed-off scale (Megatron's default is 1); 0 is no floor, as torch.
  double min_scale = 0.0;
  // false: a static scale, init_scale throughout.
  bool dynamic = true;
  bool allow_fp16_grads = false;
};

class GradScaler {
 public:
  // ValueError for options out of range: torch's checks (growth_factor > 1, backoff_factor < 1)
  // when enabled, and hysteresis >= 1, 0 <= min_scale <= init_scale.
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale, recorded by autograd. The product is the fp32 one torch computes with its fp32
  // scale tensor: an f32 loss stays f32; a 0-dim bf16 / f16 loss becomes f32 (torch's type
  // promotion between 0-dim tensors); a larger bf16 / f16 loss keeps its dtype. The loss itself
  // when disabled. The first call starts the scaler (torch's lazy initialisation): unscale_,
  // step and update fail before it.
  Tensor scale(const Tensor& loss);

  // Multiplies every gradient of `optimizer` by 1 / scale (the reciprocal in double, rounded to
  // fp32) and records whether any held inf or NaN: one pass per gradient, in place in its own
  // dtype (GradCheckKernels::unscale_and_check), that sets one flag on the gradients' device;
  // nothing is read back here: step() or update() reads it once. On the meta device nothing is
  // computed and no inf is found. Error "unscale_() has already been called on this optimizer since
  // the last update()." or "unscale_() is being called after step()." as torch; ValueError
  // "Attempting to unscale FP16 gradients." (see GradScalerOptions); NotImplementedError for
  // gradients other than f32, bf16, f16. See Note [Loss scaling and skipped steps].
  void unscale_(Optimizer& optimizer);

  // Unscales the gradients unless unscale_ already did, then calls optimizer.step() unless they
  // held inf or NaN. Returns whether the optimizer stepped. Error "step() has already been called
  // since the last update().", or "No inf checks were recorded for this optimizer." when it has no
  // gradient at all. Disabled: optimizer.step(), true.
  bool step(Optimizer& optimizer);

  // Adapts the scale to what this iteration's unscale_ calls found (see GradScalerOptions for the
  // rules) and forgets them. Error "No inf checks were recorded prior to update." when no
  // optimizer was unscaled since the last update().
  void update();
  // Sets the scale to `new_scale` (rounded to fp32) instead; the trackers stay.
  void update(double new_scale);

  // The current scale; 1 when disabled.
  float get_scale() const { return options_.enabled ? scale_ : 1.0f; }
  // Steps without inf / NaN since the last overflow or growth of the scale.
  int64_t growth_tracker() const { return options_.enabled ? growth_tracker_ : 0; }
  // Overflows left before the scale backs off (Megatron's hysteresis tracker; <= 0 once it does).
  int64_t hysteresis_tracker() const { return hysteresis_tracker_; }
  // Whether this iteration's unscale_ of `optimizer` found inf or NaN (false before it ran).
  bool found_inf(const Optimizer& optimizer) const;
  // Counts this iteration's unscale_ of `optimizer` as having found inf / NaN: step() skips it
  // and update() backs off. For dry runs on the meta device, which has no values to find one in
  // (plan/: the first steps of fp16 training often overflow). Error unless unscale_ ran since
  // the last update(); does nothing when disabled.
  void record_overflow(const Optimizer& optimizer);
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker; plus
  // hysteresis and _hysteresis_tracker when hysteresis != 1, min_scale when > 0, and
  // "dynamic": false for a static scale. {} when disabled. As torch, take it after update().
  nlohmann::json state_dict() const;
  // Restores what state_dict wrote, options included (an extra key that is absent means its
  // default, torch's behaviour). Disabled: does nothing. Error for {} as torch; ValueError naming
  // a missing or ill-typed key, or a value out of range, with nothing changed.
  void load_state_dict(const nlohmann::json& state);

 private:
  enum class Stage { ready, unscaled, stepped };  // torch's OptState
  struct OptimizerState {
    Stage stage = Stage::ready;
    bool recorded = false;  // some gradient was checked (torch: found_inf_per_device not empty)
    bool found_inf = false;
    // Native devices: f32 [1] set on the device by unscale_, read back once by step() (torch's
    // found_inf.item()), update() or found_inf(), then folded into found_inf.
    Tensor found_inf_flag;
  };

  // Error unless scale() has been called (torch's _check_scale_growth_tracker).
  void check_started(const char* function) const;
  void update_dynamic(bool found_inf);

  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_tracker_;
  bool started_ = false;
  // Keyed by the optimizer's address, as torch keys by id(optimizer).
  std::unordered_map<const Optimizer*, OptimizerState> optimizer_states_;
};

}  // namespace headroom
