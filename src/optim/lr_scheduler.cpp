// LRScheduler: HF's schedule lambdas (transformers/optimization.py), with Python's arithmetic in
// the same order so that the lrs agree with HF's to the last bit, and LambdaLR's stepping.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"

namespace headroom {

namespace {

struct TypeName {
  SchedulerType type;
  const char* name;
};

constexpr TypeName kTypeNames[] = {
    {SchedulerType::linear, "linear"},
    {SchedulerType::cosine, "cosine"},
    {SchedulerType::cosine_with_restarts, "cosine_with_restarts"},
    {SchedulerType::polynomial, "polynomial"},
    {SchedulerType::constant, "constant"},
    {SchedulerType::constant_with_warmup, "constant_with_warmup"},
    {SchedulerType::inverse_sqrt, "inverse_sqrt"},
};

// HF SchedulerType values (transformers/trainer_utils.py) that headroom does not implement.
constexpr const char* kUnsupportedHfTypes[] = {"reduce_lr_on_plateau", "cosine_with_min_lr",
                                               "cosine_warmup_with_min_lr", "warmup_stable_decay"};

// The schedules whose decay runs from num_warmup_steps to num_training_steps.
bool decays_over_training(SchedulerType type) {
  return type == SchedulerType::linear || type == SchedulerType::cosine ||
         type == SchedulerType::cosine_with_restarts || type == SchedulerType::polynomial;
}

// float(current_step) / float(max(1, num_warmup_steps)), the warmup of every HF schedule.
double warmup_multiplier(int64_t step, int64_t num_warmup_steps) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, num_warmup_steps));
}

// float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
double decay_progress(int64_t step, const SchedulerOptions& o) {
  return static_cast<double>(step - o.num_warmup_steps) /
         static_cast<double>(std::max<int64_t>(1, o.num_training_steps - o.num_warmup_steps));
}

// The options with HF's defaults filled in, or ValueError naming the field and its value.
SchedulerOptions resolve(const Optimizer& optimizer, SchedulerOptions o) {
  const char* type = scheduler_type_name(o.type);
  if (optimizer.param_groups().empty()) {
    throw ValueError(str_cat(type, " schedule: the optimizer has no parameter groups"));
  }
  o.num_warmup_steps = get_warmup_steps(o.num_training_steps, o.num_warmup_steps, o.warmup_ratio);
  if (decays_over_training(o.type)) {
    if (o.num_training_steps <= 0) {
      throw ValueError(str_cat(type, " schedule: num_training_steps is ", o.num_training_steps,
                               "; it must be positive"));
    }
    // Note [Warmup longer than training]
    // HF accepts num_warmup_steps >= num_training_steps: every step of training is then a
    // warmup step and the lr never reaches its peak (a short run with a long warmup, e.g.
    // max_steps 20 with warmup_steps 30). The lambdas stay defined past the warmup (lr_lambda
    // follows them there too) except polynomial's at num_warmup_steps == num_training_steps,
    // where its decay has no steps and HF divides 0 by 0 at the last step.
    if (o.type == SchedulerType::polynomial && o.num_warmup_steps == o.num_training_steps) {
      throw ValueError(str_cat(type, " schedule: num_warmup_steps (", o.num_warmup_steps,
                               ") equals num_training_steps (", o.num_training_steps,
                               "), leaving the decay no steps (HF divides by zero there)"));
    }
  }
  if (o.type == SchedulerType::cosine || o.type == SchedulerType::cosine_with_restarts) {
    if (!o.num_cycles) o.num_cycles = o.type == SchedulerType::cosine ? 0.5 : 1.0;
    if (!(*o.num_cycles > 0.0 && std::isfinite(*o.num_cycles))) {
      throw ValueError(str_cat(type, " schedule: num_cycles is ", *o.num_cycles,
                               "; it must be positive and finite"));
    }
  }
  if (o.type == SchedulerType::polynomial) {
    if (!o.lr_init) o.lr_init = optimizer.group_lr(0);
    if (!(o.lr_end >= 0.0 && std::isfinite(o.lr_end))) {
      throw ValueError(
          str_cat(type, " schedule: lr_end is ", o.lr_end, "; it must be finite and not negative"));
    }
    if (!(o.power > 0.0 && std::isfinite(o.power))) {
      throw ValueError(
          str_cat(type, " schedule: power is ", o.power, "; it must be positive and finite"));
    }
    if (!(*o.lr_init > o.lr_end && std::isfinite(*o.lr_init))) {
      throw ValueError(str_cat(type, " schedule: lr_end (", o.lr_end,
                               ") must be smaller than initial lr (lr_init ", *o.lr_init, ")"));
    }
  }
  if (o.type == SchedulerType::inverse_sqrt) {
    if (!o.timescale) o.timescale = o.num_warmup_steps > 0 ? o.num_warmup_steps : 10000;
    if (*o.timescale <= 0) {
      throw ValueError(
          str_cat(type, " schedule: timescale is ", *o.timescale, "; it must be positive"));
    }
  }
  return o;
}

// The value of `key` in a scheduler state, or ValueError naming the key.
const nlohmann::json& state_field(const nlohmann::json& state, const char* key) {
  const auto it = state.find(key);
  if (it == state.end()) {
    throw ValueError(str_cat("LRScheduler::load_state_dict: key '", key, "' is missing"));
  }
  return *it;
}

// An integer in min..2^62: step() counts on from it without overflow.
int64_t state_int(const nlohmann::json& state, const char* key, int64_t min) {
  const nlohmann::json& value = state_field(state, key);
  constexpr int64_t kLimit = int64_t{1} << 62;
  if (!value.is_number_integer() || value.get<int64_t>() < min || value.get<int64_t>() > kLimit) {
    throw ValueError(str_cat("LRScheduler::load_state_dict: key '", key, "' is ", value.dump(),
                             "; expected an integer in ", min, "..", kLimit));
  }
  return value.get<int64_t>();
}

std::vector<double> state_lrs(const nlohmann::json& state, const char* key, size_t groups) {
  const nlohmann::json& value = state_field(state, key);
  if (!value.is_array() || value.size() != groups) {
    throw ValueError(str_cat("LRScheduler::load_state_dict: key '", key, "' is ", value.dump(),
                             "; expected a list of ", groups, " learning rates, one per group"));
  }
  std::vector<double> lrs;
  for (const nlohmann::json& lr : value) {
    if (!lr.is_number() || !(lr.get<double>() >= 0.0 && std::isfinite(lr.get<double>()))) {
      throw ValueError(str_cat("LRScheduler::load_state_dict: key '", key, "' holds ", lr.dump(),
                               "; a learning rate is a finite number >= 0"));
    }
    lrs.push_back(lr.get<double>());
  }
  return lrs;
}

}  // namespace

SchedulerType parse_scheduler_type(std::string_view name) {
  for (const TypeName& t : kTypeNames) {
    if (name == t.name) return t.type;
  }
  for (const char* hf_name : kUnsupportedHfTypes) {
    if (name == hf_name) {
      throw NotImplementedError(
          str_cat("lr_scheduler_type '", name, "' is an HF schedule headroom does not implement"));
    }
  }
  std::string valid;
  for (const TypeName& t : kTypeNames) valid += str_cat(valid.empty() ? "" : ", ", t.name);
  throw ValueError(str_cat("unknown lr_scheduler_type '", name, "': expected one of ", valid));
}

const char* scheduler_type_name(SchedulerType type) {
  for (const TypeName& t : kTypeNames) {
    if (t.type == type) return t.name;
  }
  return "unknown";
}

int64_t get_warmup_steps(int64_t num_training_steps, int64_t warmup_steps, double warmup_ratio) {
  if (num_training_steps < 0) {
    throw ValueError(
        str_cat("num_training_steps is ", num_training_steps, "; it must not be negative"));
  }
  if (warmup_steps < 0) {
    throw ValueError(str_cat("num_warmup_steps is ", warmup_steps, "; it must not be negative"));
  }
  if (!(warmup_ratio >= 0.0 && warmup_ratio <= 1.0)) {
    throw ValueError(str_cat("warmup_ratio is ", warmup_ratio, "; it must lie in [0, 1]"));
  }
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<int64_t>(std::ceil(static_cast<double>(num_training_steps) * warmup_ratio));
}

LRScheduler::LRScheduler(Optimizer& optimizer, const SchedulerOptions& options)
    : optimizer_(optimizer), options_(resolve(optimizer, options)) {
  for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) {
    base_lrs_.push_back(optimizer_.group_lr(g));
  }
  step();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply_lrs();
}

void LRScheduler::apply_lrs() {
  const double multiplier = lr_lambda(last_epoch_);
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    optimizer_.set_group_lr(g, base_lrs_[g] * multiplier);
  }
  last_lr_.clear();
  for (size_t g = 0; g < base_lrs_.size(); ++g) last_lr_.push_back(optimizer_.group_lr(g));
}

double LRScheduler::lr_lambda(int64_t step) const {
  if (step < 0) throw ValueError(str_cat("LRScheduler::lr_lambda: step is ", step));
  const SchedulerOptions& o = options_;
  if (o.type == SchedulerType::constant) return 1.0;
  // constant_with_warmup divides by max(1.0, num_warmup_steps), the same number.
  if (step < o.num_warmup_steps) return warmup_multiplier(step, o.num_warmup_steps);
  switch (o.type) {
    case SchedulerType::constant:
    case SchedulerType::constant_with_warmup:
      return 1.0;
    case SchedulerType::linear:
      return std::max(0.0, static_cast<double>(o.num_training_steps - step) /
                               static_cast<double>(std::max<int64_t>(
                                   1, o.num_training_steps - o.num_warmup_steps)));
    case SchedulerType::cosine: {
      const double progress = decay_progress(step, o);
      return std::max(0.0,
                      0.5 * (1.0 + std::cos(std::numbers::pi * *o.num_cycles * 2.0 * progress)));
    }
    case SchedulerType::cosine_with_restarts: {
      const double progress = decay_progress(step, o);
      if (progress >= 1.0) return 0.0;
      // Python's % on these non-negative floats is fmod.
      return std::max(
          0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * std::fmod(*o.num_cycles * progress, 1.0))));
    }
    case SchedulerType::polynomial: {
      const double lr_init = *o.lr_init;
      if (step > o.num_training_steps) return o.lr_end / lr_init;
      const double lr_range = lr_init - o.lr_end;
      const int64_t decay_steps = o.num_training_steps - o.num_warmup_steps;
      const double pct_remaining =
          1.0 - static_cast<double>(step - o.num_warmup_steps) / static_cast<double>(decay_steps);
      const double decay = lr_range * std::pow(pct_remaining, o.power) + o.lr_end;
      return decay / lr_init;
    }
    case SchedulerType::inverse_sqrt: {
      const int64_t timescale = *o.timescale;
      const int64_t shift = timescale - o.num_warmup_steps;
      return 1.0 / std::sqrt(static_cast<double>(step + shift) / static_cast<double>(timescale));
    }
  }
  return 1.0;
}

nlohmann::json LRScheduler::state_dict() const {
  return {{"last_epoch", last_epoch_},
          {"base_lrs", base_lrs_},
          {"_last_lr", last_lr_},
          {"_step_count", step_count_}};
}

void LRScheduler::load_state_dict(const nlohmann::json& state) {
  if (!state.is_object()) {
    throw ValueError(
        str_cat("LRScheduler::load_state_dict: expected a JSON object, not ", state.type_name()));
  }
  const size_t groups = optimizer_.param_groups().size();
  const int64_t last_epoch = state_int(state, "last_epoch", 0);
  const int64_t step_count = state_int(state, "_step_count", 1);
  std::vector<double> base_lrs = state_lrs(state, "base_lrs", groups);
  std::vector<double> last_lr = state_lrs(state, "_last_lr", groups);
  last_epoch_ = last_epoch;
  step_count_ = step_count;
  base_lrs_ = std::move(base_lrs);
  for (size_t g = 0; g < groups; ++g) optimizer_.set_group_lr(g, last_lr[g]);
  last_lr_ = std::move(last_lr);
}

}  // namespace headroom
