// HF's TensorBoardCallback: the Trainer's log entries as TensorBoard scalars, beside metrics.jsonl.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "integrations/event_file.h"
#include "train/trainer_callback.h"

namespace headroom {

// The TensorBoard tag of a log entry's key, as transformers' rewrite_logs names it: eval_x ->
// eval/x, the allocator's peaks (peak_allocated_bytes, host_peak_reserved_bytes, ...) ->
// memory/<key>, lr -> train/learning_rate (HF's key), anything else -> train/<key>; empty for
// "step", which is the event's step rather than a value.
std::string tensorboard_tag(const std::string& key);

// At the start of training writes the arguments as text ("args", HF's args.to_json_string()) to a
// new event file in `logging_dir`; then every log entry's numbers as scalars at the trainer's
// global step (nulls skipped, as HF drops None), flushed at each entry; closed at the end.
class TensorBoardCallback : public TrainerCallback {
 public:
  TensorBoardCallback(std::string logging_dir, std::string arguments_json);

  void on_train_begin(Trainer& trainer) override;
  void on_log(Trainer& trainer, const nlohmann::ordered_json& logs) override;
  void on_train_end(Trainer& trainer) override;

  // The event file of the last on_train_begin; empty before it.
  const std::string& event_file() const { return event_file_; }

 private:
  std::string logging_dir_;
  std::string arguments_json_;
  std::unique_ptr<EventFileWriter> writer_;
  std::string event_file_;
};

}  // namespace headroom
