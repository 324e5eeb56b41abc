// The progress bar and log lines of `headroom train`.
#include "train/progress.h"

#include <cmath>

#include "core/error.h"

namespace headroom {

namespace {

std::string format_number(double value, int digits) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[64];
  // Large values (tokens/s) in full rather than as 1.387e+04.
  if (std::abs(value) >= 1e4 && std::abs(value) < 1e15) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
  }
  return text;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t total = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                  static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  } else {
    std::snprintf(text, sizeof(text), "%02lld:%02lld", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  }
  return text;
}

}  // namespace

std::string format_log_line(const nlohmann::ordered_json& entry) {
  std::string line = "{";
  for (auto it = entry.begin(); it != entry.end(); ++it) {
    if (it.key() == "step") continue;
    if (line.size() > 1) line += ", ";
    line += "'" + it.key() + "': ";
    const nlohmann::ordered_json& value = it.value();
    if (value.is_number_float()) {
      line += format_number(value.get<double>(), it.key() == "lr" ? 6 : 4);
    } else if (value.is_null()) {
      line += "None";
    } else {
      line += value.dump();
    }
  }
  return line + "}";
}

std::string format_bytes(int64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  }
  return text;
}

ProgressBar::ProgressBar(int64_t total_steps, int64_t first_step, bool live)
    : total_(total_steps),
      first_step_(first_step),
      live_(live),
      start_(std::chrono::steady_clock::now()),
      step_(first_step) {}

void ProgressBar::update(int64_t step, double loss, double lr, double tokens_per_s,
                         int64_t peak_bytes) {
  step_ = step;
  loss_ = loss;
  lr_ = lr;
  tokens_per_s_ = tokens_per_s;
  peak_bytes_ = peak_bytes;
  const auto now = std::chrono::steady_clock::now();
  if (live_ && (step == total_ || now - last_draw_ > std::chrono::milliseconds(100))) {
    last_draw_ = now;
    draw();
  }
}

void ProgressBar::draw() {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step_ - first_step_;
  const double eta =
      done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - step_) : NAN;
  constexpr int kWidth = 20;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * step_ / total_) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar += std::string(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%lld/%lld [%s] loss %s  lr %s  %s tok/s  peak %s  %s<%s\x1b[K",
               static_cast<long long>(step_), static_cast<long long>(total_), bar.c_str(),
               format_number(loss_, 4).c_str(), format_number(lr_, 3).c_str(),
               format_number(tokens_per_s_, 4).c_str(), format_bytes(peak_bytes_).c_str(),
               format_duration(elapsed).c_str(), format_duration(eta).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::print_line(const std::string& line) {
  if (live_ && drawn_) std::fprintf(stderr, "\r\x1b[K");
  std::fflush(stderr);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (live_ && drawn_) draw();
}

void ProgressBar::finish() {
  if (live_ && drawn_) {
    draw();
    std::fprintf(stderr, "\n");
    drawn_ = false;
  }
}

}  // namespace headroom
