// TrainerCallback: HF's hooks into the Trainer's loop, for work that lives in the layers below
// train/ (the profiler of profile/), so that the Trainer need not know it.
#pragma once

namespace headroom {

class Trainer;

class TrainerCallback {
 public:
  virtual ~TrainerCallback() = default;
  // Before the first step of train(), after a resume.
  virtual void on_train_begin(Trainer&) {}
  // After each optimizer step, before its logging, evaluation and checkpoint (as HF).
  virtual void on_step_end(Trainer&) {}
  // After the last step, or after the step that a stop signal ended the run at (its checkpoint
  // saved); before the final model, memory report and sample.
  virtual void on_train_end(Trainer&) {}
};

}  // namespace headroom
