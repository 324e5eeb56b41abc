// The end-of-run loss plot, a TrainerCallback so that the Trainer does not depend on cairo.
#include "integrations/loss_plot_callback.h"

#include <cstdio>
#include <exception>
#include <filesystem>

#include "core/error.h"
#include "integrations/line_plot.h"
#include "train/trainer.h"

namespace headroom {

void write_loss_plot(const std::string& path, const nlohmann::ordered_json& log_history,
                     const std::string& model) {
  PlotSeries train_series, eval_series;
  train_series.label = "train loss";
  eval_series.label = "eval loss";
  auto add = [](PlotSeries& series, const nlohmann::ordered_json& entry, const char* key) {
    const auto step = entry.find("step");
    const auto value = entry.find(key);
    if (step == entry.end() || !step->is_number() || !value->is_number()) return;
    series.x.push_back(step->get<double>());
    series.y.push_back(value->get<double>());
  };
  for (const auto& entry : log_history) {
    if (entry.contains("loss")) {
      add(train_series, entry, "loss");
    } else if (entry.contains("eval_loss")) {
      add(eval_series, entry, "eval_loss");
    }
  }
  std::vector<PlotSeries> series;
  if (!train_series.x.empty()) series.push_back(train_series);
  if (!eval_series.x.empty()) series.push_back(eval_series);
  if (series.empty()) return;
  write_plot_png(path, series,
                 {.title = str_cat(model, " loss"), .x_label = "step", .y_label = "loss"});
}

void LossPlotCallback::on_train_end(Trainer& trainer) {
  if (!trainer.is_main_process()) return;  // rank 0 alone writes into output_dir
  if (const int signal = training_stop_requested(); signal != 0) {
    std::fprintf(stderr, "headroom: the loss plot skipped: stopped by signal %d\n", signal);
    return;
  }
  try {
    write_loss_plot((std::filesystem::path(trainer.args().output_dir) / "loss.png").string(),
                    trainer.log_history(), trainer.args().model);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "headroom: warning: the loss plot failed (the run's results are saved): %s\n",
                 e.what());
  }
}

}  // namespace headroom
