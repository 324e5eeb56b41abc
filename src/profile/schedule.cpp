// torch.profiler.schedule's rule, step for step.
#include "profile/schedule.h"

#include "core/error.h"

namespace headroom {

const char* profiler_action_name(ProfilerAction action) {
  switch (action) {
    case ProfilerAction::none:
      return "NONE";
    case ProfilerAction::warmup:
      return "WARMUP";
    case ProfilerAction::record:
      return "RECORD";
    case ProfilerAction::record_and_save:
      return "RECORD_AND_SAVE";
  }
  return "?";
}

void ProfilerSchedule::validate() const {
  auto at_least = [](const char* name, int64_t value, int64_t limit) {
    if (value < limit) {
      throw ValueError(str_cat("profiler schedule: ", name, " ", value, " is below ", limit));
    }
  };
  at_least("wait", wait, 0);
  at_least("warmup", warmup, 0);
  at_least("active", active, 1);
  at_least("repeat", repeat, 0);
  at_least("skip_first", skip_first, 0);
}

ProfilerAction ProfilerSchedule::action(int64_t step) const {
  validate();
  if (step < 0) throw ValueError(str_cat("profiler schedule: step ", step, " is negative"));
  if (step < skip_first) return ProfilerAction::none;
  step -= skip_first;
  const int64_t cycle = wait + warmup + active;
  // torch compares step / cycle >= repeat in floating point: the same as this for integers.
  if (repeat > 0 && step >= repeat * cycle) return ProfilerAction::none;
  const int64_t position = step % cycle;
  if (position < wait) return ProfilerAction::none;
  if (position < wait + warmup) return ProfilerAction::warmup;
  return position < cycle - 1 ? ProfilerAction::record : ProfilerAction::record_and_save;
}

}  // namespace headroom
