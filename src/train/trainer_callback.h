// TrainerCallback: HF's hooks into the Trainer's loop, for work that lives outside train/ (the
// profiler of profile/, the TensorBoard logs of integrations/), so that the Trainer need not know
// it.
#pragma once

#include <nlohmann/json.hpp>

namespace headroom {

class Trainer;

class TrainerCallback {
 public:
  virtual ~TrainerCallback() = default;
  // Before the first step of train(), after a resume.
  virtual void on_train_begin(Trainer&) {}
  // After each optimizer step, before its logging, evaluation and checkpoint (as HF).
  virtual void on_step_end(Trainer&) {}
  // After each log entry (a line of metrics.jsonl: a training or an eval entry), as HF's on_log.
  virtual void on_log(Trainer&, const nlohmann::ordered_json& /*logs*/) {}
  // After the last step, or after the step that a stop signal ended the run at (its checkpoint
  // saved); before the final model, memory report and sample.
  virtual void on_train_end(Trainer&) {}
};

}  // namespace headroom
