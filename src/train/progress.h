// What a training run shows while it runs: a live single-line progress bar on a terminal (as
// HF's tqdm bar) and the logged metrics as Python-dict lines (as HF prints them).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace headroom {

// One log entry as HF prints it: {'loss': 2.3141, 'lr': 0.0003, 'epoch': 0.12}. Floats with 4
// significant digits (6 for the lr), integers as they are; "step" is left out as HF does.
std::string format_log_line(const nlohmann::ordered_json& entry);

// 1536 -> "1.50 KiB", as memory_summary abbreviates.
std::string format_bytes(int64_t bytes);

class ProgressBar {
 public:
  // `live`: draw the bar on stderr (a terminal, tqdm not disabled); otherwise only the lines
  // given to print_line appear.
  ProgressBar(int64_t total_steps, int64_t first_step, bool live);

  // Redraws the bar after `step` (at most 10 times a second, and always at the last step).
  void update(int64_t step, double loss, double lr, double tokens_per_s, int64_t peak_bytes);
  // Prints `line` on stdout; on a terminal the bar is cleared first and drawn again after.
  void print_line(const std::string& line);
  // Ends the bar's line.
  void finish();

 private:
  void draw();

  int64_t total_;
  int64_t first_step_;
  bool live_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  int64_t step_ = 0;
  double loss_ = 0.0, lr_ = 0.0, tokens_per_s_ = 0.0;
  int64_t peak_bytes_ = 0;
};

}  // namespace headroom
