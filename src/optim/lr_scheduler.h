// Learning-rate schedules as HF transformers' get_scheduler builds them (lr_scheduler_type), each
// a multiplier lambda(step) driven as torch.optim.lr_scheduler.LambdaLR drives it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "optim/optimizer.h"

namespace headroom {

// HF's SchedulerType values that headroom implements, named as `lr_scheduler_type` spells them.
// HF's reduce_lr_on_plateau, cosine_with_min_lr, cosine_warmup_with_min_lr and
// warmup_stable_decay are not offered.
enum class SchedulerType {
  linear,                // get_linear_schedule_with_warmup: warmup, then linear to 0
  cosine,                // get_cosine_schedule_with_warmup: warmup, then half a cosine to 0
  cosine_with_restarts,  // get_cosine_with_hard_restarts_schedule_with_warmup
  polynomial,            // get_polynomial_decay_schedule_with_warmup: to lr_end
  constant,              // get_constant_schedule: warmup ignored, as HF does
  constant_with_warmup,  // get_constant_schedule_with_warmup
  inverse_sqrt,          // get_inverse_sqrt_schedule
};

// "cosine" -> SchedulerType::cosine. ValueError names the value and lists the valid ones;
// NotImplementedError for an HF type headroom does not implement.
SchedulerType parse_scheduler_type(std::string_view name);
const char* scheduler_type_name(SchedulerType type);

// get_scheduler's arguments and its scheduler_specific_kwargs. Unset optional fields take HF's
// defaults, filled in by the LRScheduler's constructor (see LRScheduler::options()).
struct SchedulerOptions {
  SchedulerType type = SchedulerType::linear;  // TrainingArguments' default
  int64_t num_warmup_steps = 0;
  // Needed (> 0) by linear, cosine, cosine_with_restarts and polynomial; the others ignore it.
  int64_t num_training_steps = 0;
  // TrainingArguments.warmup_ratio: used only when num_warmup_steps is 0 (see get_warmup_steps).
  double warmup_ratio = 0.0;
  // cosine: 0.5 (half a wave, to 0); cosine_with_restarts: 1 (hard restarts).
  std::optional<double> num_cycles = std::nullopt;
  // polynomial: the lr reached at num_training_steps, the decay's power, and the lr it decays
  // from. HF takes lr_init from the optimizer's default lr (optimizer.defaults["lr"]) for every
  // group; unset here it is group 0's lr at construction, the same thing whenever the groups do
  // not override the default lr (as HF Trainer builds them).
  double lr_end = 1e-7;
  double power = 1.0;
  std::optional<double> lr_init = std::nullopt;
  // inverse_sqrt: num_warmup_steps, or 10000 when that is 0.
  std::optional<int64_t> timescale = std::nullopt;
};

// TrainingArguments.get_warmup_steps: `warmup_steps` when it is positive, else
// ceil(num_training_steps * warmup_ratio) computed in double as Python does (so 30 * 0.1 gives 4).
// ValueError for negative steps or a ratio outside [0, 1].
int64_t get_warmup_steps(int64_t num_training_steps, int64_t warmup_steps, double warmup_ratio);

// torch's LambdaLR with one of HF's lambdas for every group: lr_g = base_lr_g * lambda(last_epoch).
// The optimizer must outlive the scheduler.
class LRScheduler {
 public:
  // Reads the base lrs from the optimizer's groups, then, as LambdaLR's initial step, sets every
  // group's lr to base * lambda(0) (0 for the warmup schedules). ValueError naming the field and
  // its value for options HF would reject or misbehave on: negative step counts, a
  // num_training_steps of 0 where the schedule decays over it, a polynomial warmup of exactly
  // num_training_steps, and num_cycles, power, lr_end, lr_init or timescale out of range. A
  // warmup longer than training is accepted, as HF does (Note [Warmup longer than training]).
  LRScheduler(Optimizer& optimizer, const SchedulerOptions& options);

  // Advances last_epoch by one and sets every group's lr (scheduler.step(); call it after
  // optimizer.step()).
  void step();

  // HF's multiplier at `step` (>= 0).
  double lr_lambda(int64_t step) const;

  // The lrs set by the last step, per group (get_last_lr()).
  const std::vector<double>& last_lr() const { return last_lr_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // Steps taken: 0 after construction.
  int64_t last_epoch() const { return last_epoch_; }
  // step() calls, the constructor's included (torch's _step_count).
  int64_t step_count() const { return step_count_; }
  // The options with every HF default filled in and num_warmup_steps resolved from warmup_ratio.
  const SchedulerOptions& options() const { return options_; }

  // LambdaLR's state_dict keys that carry state: {"last_epoch", "base_lrs", "_last_lr",
  // "_step_count"}. The schedule itself is not saved, as torch saves no lambda.
  nlohmann::json state_dict() const;
  // Restores those keys and, since a resumed run must continue where it stopped, sets every
  // group's lr to `_last_lr` (in torch the optimizer's own state_dict restores the lr). ValueError
  // naming the key for a missing key, a value of the wrong type, or a group count that differs
  // from the optimizer's; nothing changes then.
  void load_state_dict(const nlohmann::json& state);

 private:
  void apply_lrs();

  Optimizer& optimizer_;
  SchedulerOptions options_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
};

}  // namespace headroom
