// Nesting the recorded scopes per thread (self time, memory), grouping them by name, and the
// table of torch/autograd/profiler_util.py's _build_table.
#include "profile/key_averages.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include "core/error.h"

namespace headroom {
namespace {

struct ScopeTotals {
  int64_t child_ns = 0;
  int64_t memory[2] = {0, 0};       // cpu, cuda: inside the scope
  int64_t self_memory[2] = {0, 0};  // while it was the innermost scope
  int64_t device_ns = 0;            // device time of the calls launched inside the scope
  int64_t self_device_ns = 0;       // ... while it was the innermost scope
};

// 0 for the CPU, 1 for CUDA, -1 for a device whose bytes no column counts (meta).
int memory_column(Device device) {
  if (device.is_cpu()) return 0;
  if (device.is_cuda()) return 1;
  return -1;
}

// What happens at one moment of a thread that the scopes open then are charged for: an
// allocation or free (events.memory) or a device launch (events.device, at its launch time).
struct ThreadPoint {
  int64_t time_ns;
  bool is_launch;
  size_t index;
};

// Nests the scopes of each thread by their times (they are RAII scopes, so they nest exactly)
// and gives each memory event and device launch to the scopes open on its thread at that moment.
std::vector<ScopeTotals> nest_scopes(const ProfilerEvents& events) {
  const std::vector<RecordedFunction>& functions = events.functions;
  std::vector<ScopeTotals> totals(functions.size());
  std::map<uint64_t, std::vector<size_t>> scopes_of_thread;
  for (size_t i = 0; i < functions.size(); ++i) {
    scopes_of_thread[functions[i].thread_id].push_back(i);
  }
  std::map<uint64_t, std::vector<ThreadPoint>> points_of_thread;
  for (size_t i = 0; i < events.memory.size(); ++i) {
    points_of_thread[events.memory[i].thread_id].push_back({events.memory[i].time_ns, false, i});
  }
  for (size_t i = 0; i < events.device.size(); ++i) {
    points_of_thread[events.device[i].thread_id].push_back({events.device[i].launch_ns, true, i});
  }
  // Stable: memory events at one instant keep the order in which the allocator reported them.
  for (auto& [thread, points] : points_of_thread) {
    std::stable_sort(points.begin(), points.end(), [](const ThreadPoint& a, const ThreadPoint& b) {
      return a.time_ns < b.time_ns;
    });
  }
  for (auto& [thread, scopes] : scopes_of_thread) {
    // By start; at equal starts the enclosing scope first: it ends later, or at the same time
    // and was reported later (scopes are reported as they end).
    std::sort(scopes.begin(), scopes.end(), [&](size_t a, size_t b) {
      const RecordedFunction& fa = functions[a];
      const RecordedFunction& fb = functions[b];
      if (fa.start_ns != fb.start_ns) return fa.start_ns < fb.start_ns;
      if (fa.end_ns != fb.end_ns) return fa.end_ns > fb.end_ns;
      return a > b;
    });
    const std::vector<ThreadPoint>& points = points_of_thread[thread];
    size_t next_point = 0;
    std::vector<size_t> open;  // the scopes enclosing the current moment, outermost first
    auto give_points_before = [&](int64_t limit_ns, bool inclusive) {
      for (; next_point < points.size(); ++next_point) {
        const ThreadPoint& p = points[next_point];
        if (inclusive ? p.time_ns > limit_ns : p.time_ns >= limit_ns) break;
        while (!open.empty() && functions[open.back()].end_ns < p.time_ns) open.pop_back();
        if (open.empty()) continue;
        if (p.is_launch) {
          const DeviceActivity& d = events.device[p.index];
          const int64_t duration = d.end_ns - d.start_ns;
          totals[open.back()].self_device_ns += duration;
          for (size_t scope : open) totals[scope].device_ns += duration;
          continue;
        }
        const MemoryRecord& m = events.memory[p.index];
        const int column = memory_column(m.usage.device);
        if (column < 0) continue;
        totals[open.back()].self_memory[column] += m.usage.bytes;
        for (size_t scope : open) totals[scope].memory[column] += m.usage.bytes;
      }
    };
    for (size_t i : scopes) {
      const RecordedFunction& f = functions[i];
      give_points_before(f.start_ns, false);
      // A scope that ended when this one starts is its earlier sibling, unless both start then
      // (a zero-length scope and one inside it).
      while (!open.empty() && (functions[open.back()].end_ns < f.start_ns ||
                               (functions[open.back()].end_ns == f.start_ns &&
                                functions[open.back()].start_ns < f.start_ns))) {
        open.pop_back();
      }
      if (!open.empty()) totals[open.back()].child_ns += f.end_ns - f.start_ns;
      open.push_back(i);
    }
    give_points_before(std::numeric_limits<int64_t>::max(), true);
  }
  return totals;
}

std::string format_time(double us) {
  char text[64];
  if (us >= 1e6) {
    std::snprintf(text, sizeof(text), "%.3fs", us / 1e6);
  } else if (us >= 1e3) {
    std::snprintf(text, sizeof(text), "%.3fms", us / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.3fus", us);
  }
  return text;
}

std::string format_time_share(double us, double total_us) {
  if (total_us == 0.0) return "NaN";
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f%%", us * 100.0 / total_us);
  return text;
}

std::string format_memory(int64_t bytes) {
  constexpr double kKb = 1024.0, kMb = 1024.0 * kKb, kGb = 1024.0 * kMb;
  const double b = static_cast<double>(bytes);
  char text[64];
  if (std::abs(b) >= kGb) {
    std::snprintf(text, sizeof(text), "%.2f Gb", b / kGb);
  } else if (std::abs(b) >= kMb) {
    std::snprintf(text, sizeof(text), "%.2f Mb", b / kMb);
  } else if (std::abs(b) >= kKb) {
    std::snprintf(text, sizeof(text), "%.2f Kb", b / kKb);
  } else {
    return str_cat(bytes, " b");
  }
  return text;
}

using SortKey = std::function<double(const KeyAverage&)>;

SortKey sort_key(const std::string& name) {
  static const std::vector<std::pair<std::string, SortKey>> keys = {
      {"cpu_time_total", [](const KeyAverage& a) { return a.cpu_time_total_us; }},
      {"self_cpu_time_total", [](const KeyAverage& a) { return a.self_cpu_time_total_us; }},
      {"cpu_time", [](const KeyAverage& a) { return a.cpu_time_us(); }},
      {"cuda_time_total", [](const KeyAverage& a) { return a.cuda_time_total_us; }},
      {"self_cuda_time_total", [](const KeyAverage& a) { return a.self_cuda_time_total_us; }},
      {"cuda_time", [](const KeyAverage& a) { return a.cuda_time_us(); }},
      {"device_time_total", [](const KeyAverage& a) { return a.cuda_time_total_us; }},
      {"self_device_time_total", [](const KeyAverage& a) { return a.self_cuda_time_total_us; }},
      {"device_time", [](const KeyAverage& a) { return a.cuda_time_us(); }},
      {"count", [](const KeyAverage& a) { return static_cast<double>(a.count); }},
      {"cpu_memory_usage",
       [](const KeyAverage& a) { return static_cast<double>(a.cpu_memory_usage); }},
      {"self_cpu_memory_usage",
       [](const KeyAverage& a) { return static_cast<double>(a.self_cpu_memory_usage); }},
      {"cuda_memory_usage",
       [](const KeyAverage& a) { return static_cast<double>(a.cuda_memory_usage); }},
      {"self_cuda_memory_usage",
       [](const KeyAverage& a) { return static_cast<double>(a.self_cuda_memory_usage); }},
  };
  std::string choices;
  for (const auto& [key, fn] : keys) {
    if (key == name) return fn;
    choices += (choices.empty() ? "" : ", ") + key;
  }
  throw ValueError(str_cat("key_averages table: sort_by '", name, "' (one of ", choices, ")"));
}

}  // namespace

std::vector<KeyAverage> key_averages(const ProfilerEvents& events) {
  const std::vector<RecordedFunction>& functions = events.functions;
  const std::vector<DeviceActivity>& device = events.device;
  const std::vector<ScopeTotals> totals = nest_scopes(events);
  // Scopes and device spans in one order of start: indexes below functions.size() are scopes.
  std::vector<size_t> by_start(functions.size() + device.size());
  std::iota(by_start.begin(), by_start.end(), size_t{0});
  auto start_of = [&](size_t i) {
    return i < functions.size() ? functions[i].start_ns : device[i - functions.size()].start_ns;
  };
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](size_t a, size_t b) { return start_of(a) < start_of(b); });
  std::vector<KeyAverage> averages;
  std::map<std::pair<std::string, DeviceType>, size_t> index_of_key;
  auto entry = [&](const std::string& name, DeviceType type) -> KeyAverage& {
    auto [it, inserted] = index_of_key.emplace(std::pair(name, type), averages.size());
    if (inserted) averages.push_back(KeyAverage{.key = name, .device_type = type});
    return averages[it->second];
  };
  for (size_t i : by_start) {
    if (i >= functions.size()) {
      const DeviceActivity& d = device[i - functions.size()];
      KeyAverage& a = entry(d.name, d.device.type);
      const double duration_us = static_cast<double>(d.end_ns - d.start_ns) / 1000.0;
      a.count += 1;
      a.cuda_time_total_us += duration_us;
      a.self_cuda_time_total_us += duration_us;
      continue;
    }
    const RecordedFunction& f = functions[i];
    KeyAverage& a = entry(f.name, DeviceType::cpu);
    const int64_t duration = f.end_ns - f.start_ns;
    a.count += 1;
    a.cpu_time_total_us += static_cast<double>(duration) / 1000.0;
    a.self_cpu_time_total_us += static_cast<double>(duration - totals[i].child_ns) / 1000.0;
    a.cuda_time_total_us += static_cast<double>(totals[i].device_ns) / 1000.0;
    a.self_cuda_time_total_us += static_cast<double>(totals[i].self_device_ns) / 1000.0;
    a.cpu_memory_usage += totals[i].memory[0];
    a.self_cpu_memory_usage += totals[i].self_memory[0];
    a.cuda_memory_usage += totals[i].memory[1];
    a.self_cuda_memory_usage += totals[i].self_memory[1];
  }
  return averages;
}

std::string key_averages_table(std::vector<KeyAverage> averages,
                               const KeyAveragesTableOptions& options) {
  const SortKey key = sort_key(options.sort_by);
  if (averages.empty()) return "";
  std::stable_sort(averages.begin(), averages.end(),
                   [&](const KeyAverage& a, const KeyAverage& b) { return key(a) > key(b); });

  constexpr size_t kMaxNameWidth = 55;
  constexpr int kColumnWidth = 12;
  size_t name_width = 0;
  for (const KeyAverage& a : averages) name_width = std::max(name_width, a.key.size() + 4);
  name_width = std::min(name_width, kMaxNameWidth);
  const bool has_cuda_memory =
      std::any_of(averages.begin(), averages.end(),
                  [](const KeyAverage& a) { return a.self_cuda_memory_usage > 0; });
  const bool has_cuda_time = std::any_of(averages.begin(), averages.end(), [](const KeyAverage& a) {
    return a.self_cuda_time_total_us > 0.0;
  });

  std::vector<std::string> headers = {"Name",        "Self CPU %", "Self CPU",
                                      "CPU total %", "CPU total",  "CPU time avg"};
  if (has_cuda_time) {
    headers.insert(headers.end(), {"Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"});
  }
  if (options.profile_memory) {
    headers.insert(headers.end(), {"CPU Mem", "Self CPU Mem"});
    if (has_cuda_memory) headers.insert(headers.end(), {"CUDA Mem", "Self CUDA Mem"});
  }
  headers.push_back("# of Calls");

  // Every column right-aligned and followed by two spaces, the last one too, as torch prints.
  auto row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t width = c == 0 ? name_width : kColumnWidth;
      if (cells[c].size() < width) line.append(width - cells[c].size(), ' ');
      line += cells[c] + "  ";
    }
    return line + "\n";
  };
  std::string separator;
  for (size_t c = 0; c < headers.size(); ++c) {
    separator.append(c == 0 ? name_width : kColumnWidth, '-');
    separator += "  ";
  }
  separator += "\n";

  double self_total_us = 0.0;
  // As torch with Kineto: the device spans' own entries, each device time counted once.
  double self_cuda_total_us = 0.0;
  for (const KeyAverage& a : averages) {
    self_total_us += a.self_cpu_time_total_us;
    if (a.device_type == DeviceType::cuda) self_cuda_total_us += a.self_cuda_time_total_us;
  }

  std::string table = separator + row(headers) + separator;
  int64_t rows = 0;
  for (const KeyAverage& a : averages) {
    if (rows == options.row_limit) break;
    ++rows;
    std::string name = a.key;
    if (name.size() >= kMaxNameWidth - 3) {
      name.resize(kMaxNameWidth - 3);
      name += "...";
    }
    std::vector<std::string> cells = {name,
                                      format_time_share(a.self_cpu_time_total_us, self_total_us),
                                      format_time(a.self_cpu_time_total_us),
                                      format_time_share(a.cpu_time_total_us, self_total_us),
                                      format_time(a.cpu_time_total_us),
                                      format_time(a.cpu_time_us())};
    if (has_cuda_time) {
      cells.insert(cells.end(), {format_time(a.self_cuda_time_total_us),
                                 format_time_share(a.self_cuda_time_total_us, self_cuda_total_us),
                                 format_time(a.cuda_time_total_us), format_time(a.cuda_time_us())});
    }
    if (options.profile_memory) {
      cells.push_back(format_memory(a.cpu_memory_usage));
      cells.push_back(format_memory(a.self_cpu_memory_usage));
      if (has_cuda_memory) {
        cells.push_back(format_memory(a.cuda_memory_usage));
        cells.push_back(format_memory(a.self_cuda_memory_usage));
      }
    }
    cells.push_back(std::to_string(a.count));
    table += row(cells);
  }
  table += separator;
  table += "Self CPU time total: " + format_time(self_total_us) + "\n";
  if (has_cuda_time) table += "Self CUDA time total: " + format_time(self_cuda_total_us) + "\n";
  return table;
}

}  // namespace headroom
