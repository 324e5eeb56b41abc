// ProfilerSchedule: torch.profiler.schedule, which steps of a run the profiler skips, warms up on
// and records. Steps count from 0, the profiler's own count (not the trainer's global_step).
#pragma once

#include <cstdint>

namespace headroom {

// torch.profiler.ProfilerAction. Warm-up records nothing: torch starts its tracer then only to
// discard what it collects, which a CPU-side recorder has no need of.
enum class ProfilerAction : uint8_t { none, warmup, record, record_and_save };

// "NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE", as torch prints them.
const char* profiler_action_name(ProfilerAction action);

// After skip_first steps, cycles of `wait` idle steps, `warmup` steps and `active` recorded
// steps (the last of a cycle is record_and_save), `repeat` times (0: until the run ends).
struct ProfilerSchedule {
  int64_t wait = 0;
  int64_t warmup = 0;
  int64_t active = 1;
  int64_t repeat = 0;
  int64_t skip_first = 0;

  // ValueError naming the field unless wait, warmup, repeat, skip_first >= 0 and active >= 1.
  void validate() const;
  // torch's schedule_fn(step); ValueError for a negative step or an invalid schedule.
  ProfilerAction action(int64_t step) const;
};

}  // namespace headroom
