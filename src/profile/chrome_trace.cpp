// Profiler events to Chrome trace JSON.
#include "profile/chrome_trace.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <utility>

#include "core/atomic_file.h"
#include "core/error.h"

namespace headroom {
namespace {

double microseconds(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

const char* category(RecordScope scope) {
  return scope == RecordScope::user_scope ? "user_annotation" : "cpu_op";
}

// c10::DeviceType's numbers.
int torch_device_type(DeviceType type) {
  switch (type) {
    case DeviceType::cpu:
      return 0;
    case DeviceType::cuda:
      return 1;
    case DeviceType::meta:
      return 14;
  }
  return -1;
}

int torch_device_id(Device device) { return device.is_cuda() ? device.index : -1; }

struct TimedEvent {
  int64_t start_ns;
  int64_t duration_ns;  // instants: 0
  nlohmann::ordered_json json;
};

}  // namespace

nlohmann::ordered_json chrome_trace(const ProfilerEvents& events) {
  const int64_t pid = ::getpid();
  std::vector<TimedEvent> timed;
  timed.reserve(events.functions.size() + events.memory.size() + events.device.size());
  for (const RecordedFunction& f : events.functions) {
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    if (!f.input_dims.empty()) {
      args["Input Dims"] = f.input_dims;
      args["Input type"] = f.input_types;
    }
    timed.push_back({f.start_ns,
                     f.end_ns - f.start_ns,
                     {{"ph", "X"},
                      {"cat", category(f.scope)},
                      {"name", f.name},
                      {"pid", pid},
                      {"tid", f.thread_id},
                      {"ts", microseconds(f.start_ns)},
                      {"dur", microseconds(f.end_ns - f.start_ns)},
                      {"args", std::move(args)}}});
  }
  for (const MemoryRecord& m : events.memory) {
    const MemoryUsageEvent& u = m.usage;
    timed.push_back({m.time_ns,
                     0,
                     {{"ph", "i"},
                      {"s", "t"},
                      {"cat", "cpu_instant_event"},
                      {"name", "[memory]"},
                      {"pid", pid},
                      {"tid", m.thread_id},
                      {"ts", microseconds(m.time_ns)},
                      {"args",
                       {{"Device Type", torch_device_type(u.device.type)},
                        {"Device Id", torch_device_id(u.device)},
                        {"Addr", u.address},
                        {"Bytes", u.bytes},
                        {"Total Allocated", u.total_allocated},
                        {"Total Reserved", u.total_reserved},
                        {"Category", memory_category_name(u.category)}}}}});
  }
  std::set<std::pair<int, uint64_t>> streams;  // (device index, stream): a row each
  for (const DeviceActivity& d : events.device) {
    streams.emplace(d.device.index, d.stream);
    timed.push_back({d.start_ns,
                     d.end_ns - d.start_ns,
                     {{"ph", "X"},
                      {"cat", "kernel"},
                      {"name", d.name},
                      {"pid", d.device.index},
                      {"tid", d.stream},
                      {"ts", microseconds(d.start_ns)},
                      {"dur", microseconds(d.end_ns - d.start_ns)},
                      {"args",
                       {{"device", d.device.index},
                        {"stream", d.stream},
                        {"correlation", d.correlation_id}}}}});
    if (d.correlation_id == 0) continue;
    // Kineto's arrow from the launch on the host thread to the kernel ("ac2g").
    timed.push_back({d.launch_ns,
                     0,
                     {{"ph", "s"},
                      {"cat", "ac2g"},
                      {"name", "ac2g"},
                      {"id", d.correlation_id},
                      {"pid", pid},
                      {"tid", d.thread_id},
                      {"ts", microseconds(d.launch_ns)},
                      {"args", {{"correlation", d.correlation_id}}}}});
    timed.push_back({d.start_ns,
                     0,
                     {{"ph", "f"},
                      {"bp", "e"},
                      {"cat", "ac2g"},
                      {"name", "ac2g"},
                      {"id", d.correlation_id},
                      {"pid", d.device.index},
                      {"tid", d.stream},
                      {"ts", microseconds(d.start_ns)},
                      {"args", {{"correlation", d.correlation_id}}}}});
  }
  // Time order; at equal starts the longer span (the enclosing scope) first. Stable, so that
  // memory events at one instant keep the order in which the allocator reported them.
  std::stable_sort(timed.begin(), timed.end(), [](const TimedEvent& a, const TimedEvent& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.duration_ns > b.duration_ns;
  });
  nlohmann::ordered_json trace_events = nlohmann::ordered_json::array();
  trace_events.push_back({{"name", "process_name"},
                          {"ph", "M"},
                          {"pid", pid},
                          {"tid", 0},
                          {"args", {{"name", "headroom"}}}});
  int named_device = -1;
  for (const auto& [device, stream] : streams) {
    if (device != named_device) {
      trace_events.push_back({{"name", "process_name"},
                              {"ph", "M"},
                              {"pid", device},
                              {"tid", 0},
                              {"args", {{"name", str_cat("GPU ", device)}}}});
      named_device = device;
    }
    trace_events.push_back({{"name", "thread_name"},
                            {"ph", "M"},
                            {"pid", device},
                            {"tid", stream},
                            {"args", {{"name", str_cat("stream ", stream)}}}});
  }
  for (TimedEvent& e : timed) trace_events.push_back(std::move(e.json));
  return {
      {"schemaVersion", 1}, {"displayTimeUnit", "ms"}, {"traceEvents", std::move(trace_events)}};
}

void write_chrome_trace(const ProfilerEvents& events, const std::string& path) {
  write_file_atomically(path, chrome_trace(events).dump() + "\n");
}

}  // namespace headroom
