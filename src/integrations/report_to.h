// HF's report_to and logging_dir: which integrations a run reports its logs to, and where
// TensorBoard's go by default.
#pragma once

#include <string>

namespace headroom {

// The integrations of --report_to. headroom has one: TensorBoard.
struct ReportTo {
  bool tensorboard = false;
};

// "none", "all" (every integration headroom has, as HF's every installed one), or a
// comma-separated list of names ("tensorboard"). ValueError naming the value and the choices
// (for the caller to prefix with the option's name).
ReportTo parse_report_to(const std::string& text);

// HF's default logging_dir: output_dir/runs/<Mon DD_HH-MM-SS>_<hostname>, at the current local
// time (transformers' default_logdir, torch's SummaryWriter default).
std::string default_logging_dir(const std::string& output_dir);

}  // namespace headroom
