// The Trainer's logs to TensorBoard, as transformers' integrations.TensorBoardCallback does.
#include "integrations/tensorboard_callback.h"

#include "train/trainer.h"

namespace headroom {

std::string tensorboard_tag(const std::string& key) {
  if (key == "step") return "";
  if (key.starts_with("eval_")) return "eval/" + key.substr(5);
  if (key.starts_with("peak_") || key.starts_with("host_peak_")) return "memory/" + key;
  if (key == "lr") return "train/learning_rate";
  return "train/" + key;
}

TensorBoardCallback::TensorBoardCallback(std::string logging_dir, std::string arguments_json)
    : logging_dir_(std::move(logging_dir)), arguments_json_(std::move(arguments_json)) {}

void TensorBoardCallback::on_train_begin(Trainer& trainer) {
  // As HF's TensorBoardCallback: rank 0 alone writes (the others never get an on_log).
  if (!trainer.is_main_process()) return;
  writer_ = std::make_unique<EventFileWriter>(logging_dir_);
  event_file_ = writer_->path();
  // HF's add_text("args", ...) passes no step: 0.
  writer_->add_text("args", arguments_json_, 0);
  writer_->flush();
}

void TensorBoardCallback::on_log(Trainer& trainer, const nlohmann::ordered_json& logs) {
  if (!writer_) return;
  for (auto it = logs.begin(); it != logs.end(); ++it) {
    const std::string tag = tensorboard_tag(it.key());
    if (tag.empty() || !it.value().is_number()) continue;
    writer_->add_scalar(tag, it.value().get<double>(), trainer.global_step());
  }
  writer_->flush();
}

void TensorBoardCallback::on_train_end(Trainer&) { writer_.reset(); }

}  // namespace headroom
