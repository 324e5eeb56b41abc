// Placeholder until the trainer lands on main (issue 6): both entry points refuse to run.
#include "train/trainer.h"

#include "core/error.h"

namespace headroom {

int run_training(const TrainingArguments&) {
  throw NotImplementedError("headroom train: the trainer is not built yet");
}

EvalResult evaluate_file(const std::string&, const std::string&, int64_t, int64_t,
                         const std::string&) {
  throw NotImplementedError("headroom eval: the evaluator is not built yet");
}

}  // namespace headroom
