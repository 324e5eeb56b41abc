// format_memory_summary, after memory_summary() in PyTorch's torch/cuda/memory.py; the golden
// files in tests/fixtures come from PyTorch's own function (tools/gen_memory_summary_golden.py).
#include "memory/memory_summary.h"

#include <algorithm>
#include <iterator>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace headroom {
namespace {

constexpr size_t kWidth = 75;  // characters between the `|` frame

// Python's //, which rounds toward negative infinity.
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && (a < 0) != (b < 0)) --q;
  return q;
}

// Width in code points, as Python's format() pads.
size_t text_width(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string pad_left(const std::string& s, size_t width) {
  const size_t w = text_width(s);
  return w >= width ? s : std::string(width - w, ' ') + s;
}

std::string pad_right(const std::string& s, size_t width) {
  const size_t w = text_width(s);
  return w >= width ? s : s + std::string(width - w, ' ');
}

// The units switch on the row's `pref` value (for pool rows, the `all` row's), so that a column
// of one metric is in one unit. pref is divided as a float, as in PyTorch; the value floors.
std::string format_size(int64_t size, int64_t pref) {
  static constexpr const char* kPrefixes[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const char* prefix = kPrefixes[0];
  auto scaled = static_cast<double>(pref);
  for (size_t i = 1; i < std::size(kPrefixes); ++i) {
    if (scaled < 768 * 1024) break;
    prefix = kPrefixes[i];
    size = floor_div(size, 1024);
    scaled /= 1024;
  }
  return str_cat(pad_left(std::to_string(size), 6), " ", prefix);
}

std::string format_count(int64_t count, int64_t pref) {
  static constexpr const char* kPrefixes[] = {" ", "K", "M"};
  const char* prefix = kPrefixes[0];
  auto scaled = static_cast<double>(pref);
  for (size_t i = 1; i < std::size(kPrefixes); ++i) {
    if (scaled < 750 * 1000) break;
    prefix = kPrefixes[i];
    count = floor_div(count, 1000);
    scaled /= 1000;
  }
  return str_cat(pad_left(std::to_string(count), 7), " ", prefix, " ");
}

// PyTorch's " {_:16} PyTorch CUDA memory summary, device ID {device:<17d} ", reworded with the
// same 75 characters: 18 spaces, the 32-character phrase, the name in a 24-character field and
// one space. A longer name eats into the left margin; one that cannot fit is shortened.
std::string title_line(const std::string& device_name) {
  constexpr std::string_view kPhrase = "headroom memory summary, device ";
  constexpr size_t kMarginAndName = kWidth - kPhrase.size() - 1;  // 42
  constexpr size_t kNameField = 24;
  std::string name = device_name;
  if (text_width(name) > kMarginAndName - 1) {
    // Keep whole code points: cut after the 38th.
    size_t end = 0;
    for (size_t points = 0; end < name.size(); ++end) {
      const bool starts_point = (static_cast<unsigned char>(name[end]) & 0xC0) != 0x80;
      if (starts_point && points++ == kMarginAndName - 4) break;
    }
    name = name.substr(0, end) + "...";
  }
  const size_t margin = kMarginAndName - std::max(kNameField, text_width(name));
  return str_cat(std::string(margin, ' '), kPhrase, pad_right(name, kNameField), " ");
}

class StatsReader {
 public:
  explicit StatsReader(const std::map<std::string, int64_t>& stats) : stats_(stats) {}
  int64_t operator()(const std::string& key) const {
    const auto it = stats_.find(key);
    if (it == stats_.end()) {
      throw ValueError(str_cat("format_memory_summary: stats has no '", key,
                               "' (keys are those of torch.cuda.memory_stats())"));
    }
    return it->second;
  }

 private:
  const std::map<std::string, int64_t>& stats_;
};

using Formatter = std::string (*)(int64_t, int64_t);

std::string metric_row(const std::string& label, const int64_t (&values)[4],
                       const int64_t (&prefs)[4], Formatter format) {
  return str_cat(" ", pad_right(label, 21), " | ", format(values[0], prefs[0]), " | ",
                 format(values[1], prefs[1]), " | ", format(values[2], prefs[2]), " | ",
                 format(values[3], prefs[3]), " ");
}

}  // namespace

std::string format_memory_summary(const std::map<std::string, int64_t>& stats,
                                  const std::string& device_name, bool abbreviated) {
  const StatsReader stat(stats);
  static constexpr const char* kColumns[] = {"current", "peak", "allocated", "freed"};
  auto read_row = [&](const std::string& prefix, int64_t(&values)[4]) {
    for (int i = 0; i < 4; ++i) values[i] = stat(prefix + kColumns[i]);
  };

  std::vector<std::string> lines;
  const std::string heavy(kWidth, '=');
  const std::string light(kWidth, '-');
  lines.push_back(heavy);
  lines.push_back(title_line(device_name));
  lines.push_back(light);
  // PyTorch's "  {_:9} CUDA OOMs: {num_ooms:<12d} | {_:6} cudaMalloc retries: {...:<8d}  ",
  // reworded with the values kept in their columns.
  lines.push_back(str_cat(
      std::string(17, ' '), "OOMs: ", pad_right(std::to_string(stat("num_ooms")), 12), " | ",
      std::string(5, ' '),
      "device alloc retries: ", pad_right(std::to_string(stat("num_alloc_retries")), 8), "  "));
  lines.push_back(heavy);
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");

  struct Metric {
    const char* key;
    const char* label;
    Formatter format;
  };
  static constexpr Metric kPoolMetrics[] = {
      {"allocated_bytes", "Allocated memory", format_size},
      {"active_bytes", "Active memory", format_size},
      {"requested_bytes", "Requested memory", format_size},
      {"reserved_bytes", "GPU reserved memory", format_size},
      {"inactive_split_bytes", "Non-releasable memory", format_size},
      {"allocation", "Allocations", format_count},
      {"active", "Active allocs", format_count},
      {"segment", "GPU reserved segments", format_count},
      {"inactive_split", "Non-releasable allocs", format_count},
  };
  for (const Metric& metric : kPoolMetrics) {
    lines.push_back(light);
    int64_t all[4];
    read_row(str_cat(metric.key, ".all."), all);
    lines.push_back(metric_row(metric.label, all, all, metric.format));
    if (abbreviated) continue;
    for (const char* pool : {"large", "small"}) {
      int64_t values[4];
      read_row(str_cat(metric.key, ".", pool, "_pool."), values);
      const std::string label = str_cat("      from ", pool, " pool");
      lines.push_back(metric_row(label, values, all, metric.format));
    }
  }
  static constexpr Metric kOversizeMetrics[] = {
      {"oversize_allocations", "Oversize allocations", format_count},
      {"oversize_segments", "Oversize GPU segments", format_count},
  };
  for (const Metric& metric : kOversizeMetrics) {
    lines.push_back(light);
    int64_t values[4];
    read_row(str_cat(metric.key, "."), values);
    lines.push_back(metric_row(metric.label, values, values, metric.format));
  }
  lines.push_back(heavy);

  std::string out;
  for (const std::string& line : lines) out += str_cat("|", line, "|\n");
  return out;
}

}  // namespace headroom
