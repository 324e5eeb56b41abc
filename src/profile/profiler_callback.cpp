// The profiler's hooks into the Trainer.
#include "profile/profiler_callback.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "profile/chrome_trace.h"
#include "profile/key_averages.h"
#include "train/trainer.h"
#include "train/training_config.h"

namespace headroom {

ProfilerSchedule profiler_schedule(const TrainingArguments& args) {
  const ProfilerSchedule schedule{.wait = args.profile_wait,
                                  .warmup = args.profile_warmup,
                                  .active = args.profile_active,
                                  .repeat = args.profile_repeat,
                                  .skip_first = args.profile_skip_first};
  try {
    schedule.validate();
  } catch (const ValueError& e) {
    throw ValueError(str_cat(e.what(), " (the training arguments profile_*)"));
  }
  return schedule;
}

ProfilerCallback::ProfilerCallback(const TrainingArguments& args)
    : schedule_(profiler_schedule(args)) {}

void ProfilerCallback::on_train_begin(Trainer& trainer) {
  profiler_ = std::make_unique<Profiler>(
      ProfilerOptions{.schedule = schedule_,
                      .profile_memory = true,
                      .device_activity = make_device_activity_source(trainer.config().device)});
  profiler_->start();
}

void ProfilerCallback::on_step_end(Trainer&) {
  if (profiler_) profiler_->step();
}

void ProfilerCallback::on_train_end(Trainer& trainer) {
  if (!profiler_) return;
  profiler_->stop();
  const ProfilerEvents events = profiler_->events();
  const std::string path = (std::filesystem::path(trainer.args().output_dir) / kTraceFile).string();
  write_chrome_trace(events, path);
  if (events.functions.empty()) {
    std::printf(
        "Profiler: no step was recorded (the run ended before the schedule's active "
        "steps); %s holds no op events\n",
        path.c_str());
  } else {
    const char* sort_by = events.device.empty() ? "cpu_time_total" : "self_cuda_time_total";
    std::printf("%s", key_averages_table(key_averages(events),
                                         {.sort_by = sort_by, .row_limit = kTableRows})
                          .c_str());
    std::printf("Profiler trace written to %s (open it in ui.perfetto.dev or chrome://tracing)\n",
                path.c_str());
  }
  std::fflush(stdout);
}

}  // namespace headroom
