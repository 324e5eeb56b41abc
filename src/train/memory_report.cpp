// The trainer's memory breakdown, as a table and as memory.json.
#include "train/memory_report.h"

#include <algorithm>
#include <cstdio>

#include "memory/device_memory.h"
#include "train/progress.h"

namespace headroom {

void MemoryBreakdown::finish() {
  const int64_t rest = std::max<int64_t>(0, peak_allocated - parameters - gradients -
                                                optimizer_states);
  activations = std::min(activations, rest);
  other = rest - activations;
}

nlohmann::ordered_json MemoryBreakdown::to_json() const {
  return {{"parameters", parameters},         {"gradients", gradients},
          {"optimizer_states", optimizer_states}, {"activations", activations},
          {"other", other},                   {"peak_allocated_bytes", peak_allocated},
          {"peak_reserved_bytes", peak_reserved}};
}

std::string MemoryBreakdown::format() const {
  std::string text = "memory at the peak (see Note [Memory breakdown at the peak]):\n";
  auto row = [&](const char* name, int64_t bytes) {
    char line[128];
    const double share = peak_allocated > 0 ? 100.0 * static_cast<double>(bytes) /
                                                  static_cast<double>(peak_allocated)
                                            : 0.0;
    std::snprintf(line, sizeof(line), "  %-18s %12s  %5.1f%%\n", name, format_bytes(bytes).c_str(),
                  share);
    text += line;
  };
  row("parameters", parameters);
  row("gradients", gradients);
  row("optimizer states", optimizer_states);
  row("activations", activations);
  row("other", other);
  row("peak allocated", peak_allocated);
  char line[128];
  std::snprintf(line, sizeof(line), "  %-18s %12s\n", "peak reserved",
                format_bytes(peak_reserved).c_str());
  return text + line;
}

nlohmann::ordered_json memory_report_json(const MemoryBreakdown& breakdown, Device device) {
  nlohmann::ordered_json stats = nlohmann::ordered_json::object();
  for (const auto& [key, value] : memory_stats(device)) stats[key] = value;
  return {{"device", device.str()}, {"breakdown", breakdown.to_json()}, {"memory_stats", stats}};
}

}  // namespace headroom
