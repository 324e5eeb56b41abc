// The allocator's event history (torch.cuda.memory._record_memory_history): alloc / free /
// segment events with size, address, time and the label stack of MemoryContext scopes that
// were open, kept in a ring buffer per device and dumped by memory_snapshot().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memory/device_allocator.h"

namespace headroom {

// Labels of the open MemoryContext scopes, innermost first (as PyTorch orders stack frames).
using ContextLabels = std::vector<std::string>;

// Names the work that allocates while it is open ("forward", "block.3", "optimizer.step");
// nested scopes stack. Recorded with each allocation only while history recording is on.
class MemoryContext {
 public:
  explicit MemoryContext(std::string label);
  ~MemoryContext();
  MemoryContext(const MemoryContext&) = delete;
  MemoryContext& operator=(const MemoryContext&) = delete;
};

// The calling thread's current labels, shared between allocations made under the same scopes.
std::shared_ptr<const ContextLabels> current_memory_context();

struct TraceEntry {
  // PyTorch's action names, so memory_viz reads them unchanged.
  enum class Action : uint8_t {
    alloc,
    free_requested,
    free_completed,
    segment_alloc,
    segment_free,
    segment_map,    // pages mapped into an expandable segment
    segment_unmap,  // ... and unmapped from it
    oom
  };
  Action action;
  uintptr_t address;  // for oom: the device's free bytes, as PyTorch records it
  size_t size;
  StreamId stream;
  int64_t time_us;  // microseconds since the epoch
  std::shared_ptr<const ContextLabels> context;
};

const char* trace_action_name(TraceEntry::Action action);

// Starts recording on every device, keeping the last `max_entries` events per device;
// 0 stops recording (and keeps what was recorded until the next start).
void record_memory_history(size_t max_entries = 100000);
// The per-device capacity requested by the last record_memory_history call; 0 = off.
size_t memory_history_max_entries();

// A bounded buffer of trace entries, oldest dropped first.
class TraceRing {
 public:
  void push(TraceEntry entry, size_t max_entries);
  std::vector<TraceEntry> entries() const;  // oldest first
  void clear();

 private:
  std::vector<TraceEntry> entries_;
  size_t next_ = 0;  // slot to overwrite once full
};

}  // namespace headroom
