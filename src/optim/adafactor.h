// Adafactor (Shazeer & Stern 2018) as HF's transformers.optimization.Adafactor: a factored second
// moment for matrices (a running mean per row and per column instead of one per element), a
// relative step size scaled by the parameter's RMS, update clipping by RMS, optional first moment.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace headroom {

// HF's Adafactor defaults (eps is its pair (eps1, eps2)). HF Trainer's optim=adafactor sets
// scale_parameter and relative_step false and passes learning_rate as lr.
struct AdafactorOptions {
  std::optional<double> lr = std::nullopt;     // external lr; must be unset with relative_step
  double eps1 = 1e-30;                         // added to g^2
  double eps2 = 1e-3;                          // floor of the parameter RMS in the step size
  double clip_threshold = 1.0;                 // largest RMS of the update
  double decay_rate = -0.8;                    // beta2 at step t = 1 - t^decay_rate
  std::optional<double> beta1 = std::nullopt;  // first moment (4 more bytes per element) if set
  double weight_decay = 0.0;                   // decoupled: param -= weight_decay * lr_t * param
  bool scale_parameter = true;                 // lr_t *= max(eps2, RMS(param))
  bool relative_step = true;                   // lr_t = min(1e-2, 1/sqrt(t)) instead of lr
  bool warmup_init = false;  // lr_t = min(1e-6 * t, 1/sqrt(t)); needs relative_step
};

// What Adafactor keeps per parameter, all f32, allocated at the parameter's first step. A
// parameter of 2 or more dimensions [..., rows, cols] keeps exp_avg_sq_row [..., rows] and
// exp_avg_sq_col [..., cols]: 4 * (rows + cols) bytes per matrix instead of 4 * rows * cols.
// Vectors keep exp_avg_sq of their own shape.
struct AdafactorState {
  Tensor exp_avg_sq_row;
  Tensor exp_avg_sq_col;
  Tensor exp_avg_sq;
  Tensor exp_avg;    // only with beta1
  int64_t step = 0;  // steps taken with a gradient
  // HF's state["RMS"] (RMS of the parameter before the last step) and the step size lr_t of the
  // last step (what HF's AdafactorSchedule reports), as loaded from a state dict.
  double rms = 0.0;
  double lr = 0.0;
  // rms and lr of the last step as the device's kernel left them (2 doubles' bits in an i64
  // tensor), read back only by state_dict(); once defined, rms and lr above are not kept current.
  Tensor rms_lr;
};

class Adafactor final : public Optimizer {
 public:
  // Parameters f32 or bf16 (updated in fp32 and rounded to nearest, as HF does), on the CPU or
  // the meta device, where step() allocates the state and computes nothing. ValueError, with
  // HF's messages, for an lr given with relative_step or warmup_init without relative_step; also
  // for no lr without relative_step and for values out of range, naming the option.
  explicit Adafactor(const std::vector<Tensor>& params, const AdafactorOptions& options = {});
  // What step() allocates for a parameter of `shape` (AdafactorState's statistics; the two
  // scalars of rms_lr aside).
  static std::vector<StateTensor> state_layout(const Shape& shape, const AdafactorOptions& options);
  explicit Adafactor(const std::vector<NamedTensor>& named_params,
                     const AdafactorOptions& options = {});
  explicit Adafactor(std::vector<ParamGroup> groups, const AdafactorOptions& options = {});

  // HF's step() with fp32 math (See Note [Adafactor step]). With relative_step the groups' lr
  // is not used (it reads 0).
  void step() override;
  std::string name() const override { return "adafactor"; }
  // exp_avg_sq_row / exp_avg_sq_col (or exp_avg_sq), exp_avg, step and RMS per parameter.
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state) override;

  const AdafactorOptions& options() const { return options_; }
  const AdafactorState& state(size_t group, size_t index) const;

 private:
  AdafactorOptions options_;
  std::vector<std::vector<AdafactorState>> states_;  // parallel to groups_[g].params
};

}  // namespace headroom
