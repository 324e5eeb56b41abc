// Collecting and encoding memory snapshots.
#include "memory/memory_snapshot.h"

#include <filesystem>
#include <system_error>

#include "core/atomic_file.h"
#include "core/error.h"
#include "memory/device_memory.h"

namespace headroom {
namespace {

PickleValue frames(const std::shared_ptr<const ContextLabels>& context) {
  PickleValue out = PickleValue::list();
  if (!context) return out;
  for (const std::string& label : *context) {
    out.append(PickleValue::dict({{"filename", "headroom"}, {"line", 0}, {"name", label}}));
  }
  return out;
}

PickleValue segment_value(const SegmentInfo& s, int device_position) {
  PickleValue blocks = PickleValue::list();
  for (const BlockInfo& b : s.blocks) {
    blocks.append(PickleValue::dict({
        {"address", static_cast<uint64_t>(b.address)},
        {"size", b.size},
        {"requested_size", b.requested_size},
        {"state", b.allocated ? "active_allocated" : "inactive"},
        {"frames", frames(b.context)},
    }));
  }
  return PickleValue::dict({
      {"device", device_position},
      {"address", static_cast<uint64_t>(s.address)},
      {"total_size", s.total_size},
      {"allocated_size", s.allocated_size},
      {"active_size", s.active_size},
      {"requested_size", s.requested_size},
      {"stream", s.stream},
      {"segment_type", s.is_large ? "large" : "small"},
      {"segment_pool_id", PickleValue::tuple({0, 0})},
      {"is_expandable", s.is_expandable},
      {"frames", frames(s.context)},
      {"blocks", std::move(blocks)},
  });
}

PickleValue trace_value(const TraceEntry& e) {
  // PyTorch stores the device's free bytes of an oom event under "device_free", not "addr".
  const bool oom = e.action == TraceEntry::Action::oom;
  return PickleValue::dict({
      {"action", trace_action_name(e.action)},
      {oom ? "device_free" : "addr", static_cast<uint64_t>(e.address)},
      {"size", e.size},
      {"stream", e.stream},
      {"time_us", e.time_us},
      {"frames", frames(e.context)},
  });
}

}  // namespace

MemorySnapshot memory_snapshot() {
  MemorySnapshot snapshot;
  for (const CachingAllocator* allocator : caching_allocators()) {
    snapshot.devices.push_back(allocator->device());
    snapshot.allocator_settings.push_back(allocator->config().str());
    snapshot.memory_limits.push_back(allocator->memory_limit());
    snapshot.segments.push_back(allocator->segments());
    snapshot.device_traces.push_back(allocator->trace());
  }
  return snapshot;
}

PickleValue memory_snapshot_to_pickle(const MemorySnapshot& snapshot) {
  PickleValue segments = PickleValue::list();
  PickleValue traces = PickleValue::list();
  PickleValue devices = PickleValue::list();
  PickleValue settings = PickleValue::dict();
  for (size_t d = 0; d < snapshot.devices.size(); ++d) {
    const std::string name = snapshot.devices[d].str();
    devices.append(name);
    for (const SegmentInfo& s : snapshot.segments[d]) {
      segments.append(segment_value(s, static_cast<int>(d)));
    }
    PickleValue trace = PickleValue::list();
    for (const TraceEntry& e : snapshot.device_traces[d]) trace.append(trace_value(e));
    traces.append(std::move(trace));
    settings.set(name, PickleValue::dict({{"HEADROOM_ALLOC_CONF", snapshot.allocator_settings[d]},
                                          {"memory_limit", snapshot.memory_limits[d]}}));
  }
  return PickleValue::dict({
      {"segments", std::move(segments)},
      {"device_traces", std::move(traces)},
      {"allocator_settings", std::move(settings)},
      {"devices", std::move(devices)},
  });
}

void dump_memory_snapshot(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (error) {
    throw Error(
        str_cat("cannot write '", path, "': cannot create its directory: ", error.message()));
  }
  write_file_atomically(path, pickle_dumps(memory_snapshot_to_pickle(memory_snapshot())));
}

}  // namespace headroom
