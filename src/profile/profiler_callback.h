// ProfilerCallback: `headroom train --profile`, a Profiler run over the Trainer's optimizer steps
// as HF users attach torch.profiler (prof.step() in on_step_end), writing output_dir/trace.json
// and printing the key_averages table when training ends.
#pragma once

#include <memory>
#include <string>

#include "profile/profiler.h"
#include "train/trainer_callback.h"
#include "train/training_arguments.h"

namespace headroom {

// The schedule of args' profile_* options. ValueError naming the option for a bad value.
ProfilerSchedule profiler_schedule(const TrainingArguments& args);

class ProfilerCallback final : public TrainerCallback {
 public:
  static constexpr const char* kTraceFile = "trace.json";
  static constexpr int64_t kTableRows = 30;  // the printed table; trace.json holds everything

  // ValueError naming the option for a bad profile_* value.
  explicit ProfilerCallback(const TrainingArguments& args);

  // Starts a profiler; on a device whose backend times its kernels (CUDA), with its device
  // activity (Note [CUDA time in the profiler]).
  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer) override;
  // Stops the profiler, writes output_dir/trace.json and prints the table, sorted by self CUDA
  // time when device time was recorded, else by total CPU time. A schedule whose active steps
  // never came writes a trace without op events and says so.
  void on_train_end(Trainer& trainer) override;

  // The profiler of this run; null before on_train_begin.
  const Profiler* profiler() const { return profiler_.get(); }

 private:
  ProfilerSchedule schedule_;
  std::unique_ptr<Profiler> profiler_;
};

}  // namespace headroom
