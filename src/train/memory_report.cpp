// The memory breakdown at the peak, as a table and as memory.json.
#include "train/memory_report.h"

#include <cstdio>

#include "memory/alloc_config.h"
#include "memory/device_memory.h"

namespace headroom {

namespace {

// The order of the table and the JSON: the model's states first, then what a step adds.
constexpr MemoryCategory kReportOrder[] = {
    MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer_states,
    MemoryCategory::activations, MemoryCategory::temporaries};

}  // namespace

MemoryBreakdown MemoryBreakdown::of_device(Device device) {
  const DeviceStats stats = caching_allocator(device).stats();
  MemoryBreakdown b;
  b.at_peak = stats.category_at_peak;
  b.peak_allocated = stats.allocated_bytes[static_cast<size_t>(StatType::all)].peak;
  b.peak_reserved = stats.reserved_bytes[static_cast<size_t>(StatType::all)].peak;
  b.allocator_slack = b.peak_reserved - b.peak_allocated;
  b.at_reserved_peak = caching_allocator(device).reserved_peak_state();
  return b;
}

nlohmann::ordered_json MemoryBreakdown::breakdown_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (MemoryCategory c : kReportOrder) out[memory_category_name(c)] = bytes(c);
  out["allocator_slack"] = allocator_slack;
  return out;
}

nlohmann::ordered_json MemoryBreakdown::to_json() const {
  nlohmann::ordered_json out = breakdown_json();
  out["peak_allocated_bytes"] = peak_allocated;
  out["peak_reserved_bytes"] = peak_reserved;
  return out;
}

std::string MemoryBreakdown::format() const {
  std::string text = "memory at the peak (see Note [Memory breakdown at the peak]):\n";
  auto row = [&](const char* name, int64_t value) {
    char line[128];
    const double share =
        peak_reserved > 0 ? 100.0 * static_cast<double>(value) / static_cast<double>(peak_reserved)
                          : 0.0;
    std::snprintf(line, sizeof(line), "  %-18s %12s  %5.1f%%\n", name,
                  format_bytes(static_cast<size_t>(value)).c_str(), share);
    text += line;
  };
  for (MemoryCategory c : kReportOrder) row(memory_category_name(c), bytes(c));
  row("peak allocated", peak_allocated);
  row("allocator_slack", allocator_slack);
  row("peak reserved", peak_reserved);
  text += format_slack_report(at_reserved_peak, peak_allocated, peak_reserved);
  return text;
}

nlohmann::ordered_json memory_report_json(const MemoryBreakdown& breakdown, Device device) {
  nlohmann::ordered_json stats = nlohmann::ordered_json::object();
  for (const auto& [key, value] : memory_stats(device)) stats[key] = value;
  const nlohmann::ordered_json slack = {
      {"exceeds_threshold",
       slack_exceeds_threshold(breakdown.peak_allocated, breakdown.peak_reserved)},
      {"at_reserved_peak", breakdown.at_reserved_peak.to_json()}};
  return {{"device", device.str()},
          {"breakdown", breakdown.to_json()},
          {"slack", slack},
          {"memory_stats", stats}};
}

}  // namespace headroom
