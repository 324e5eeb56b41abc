// Observers of every CachingAllocator's allocations and frees, told each block's size and the
// device's totals after it: what the profiler turns into "[memory]" events (PyTorch's
// reportMemoryUsage). Nothing is computed for them while none is installed.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/observer_list.h"
#include "memory/memory_category.h"

namespace headroom {

struct MemoryUsageEvent {
  Device device;
  uintptr_t address = 0;
  int64_t bytes = 0;            // the block's (rounded) size; negative for a free, as PyTorch
  int64_t total_allocated = 0;  // the device's allocated_bytes.all.current after the event
  int64_t total_reserved = 0;   // its reserved_bytes.all.current after the event
  MemoryCategory category = MemoryCategory::temporaries;  // of the block
};

class MemoryObserver {
 public:
  virtual ~MemoryObserver() = default;
  // Called on the allocating thread after the allocator has released its lock, under the
  // registry's (see ObserverList). It must not allocate from a CachingAllocator: that would
  // call it again on the same thread.
  virtual void on_memory_usage(const MemoryUsageEvent& event) = 0;
};

namespace detail {
extern ObserverList<MemoryObserver> g_memory_observers;
}  // namespace detail

// The observers of every CachingAllocator (add / remove).
inline ObserverList<MemoryObserver>& memory_observers() { return detail::g_memory_observers; }

}  // namespace headroom
