// The loss curve of `headroom train`: output_dir/loss.png at the end of the run, drawn from the
// Trainer's log history.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "train/trainer_callback.h"

namespace headroom {

// Plots the training losses and the eval losses of `log_history` (trainer_state.json's) against
// their steps into the PNG at `path`, titled "<model> loss"; entries without a numeric step or
// loss (a NaN loss is null in the log) are left out. Writes nothing when no entry has a loss.
void write_loss_plot(const std::string& path, const nlohmann::ordered_json& log_history,
                     const std::string& model);

// At the end of training (a stopped run too), output_dir/loss.png. Optional, as the sample is:
// a failure is a warning and a pending stop request skips it; the run's exit status stays.
class LossPlotCallback : public TrainerCallback {
 public:
  void on_train_end(Trainer& trainer) override;
};

}  // namespace headroom
