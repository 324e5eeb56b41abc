// Allocator statistics with PyTorch's names and meaning (torch.cuda.memory_stats()): each Stat
// keeps current / peak / allocated (cumulative increases) / freed (cumulative decreases).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "memory/memory_category.h"

namespace headroom {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void increase(int64_t amount) {
    current += amount;
    if (current > peak) peak = current;
    allocated += amount;
  }
  void decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void reset_accumulated() {
    allocated = 0;
    freed = 0;
  }
  void reset_peak() { peak = current; }
};

// The pool split of every per-pool stat: all = small + large.
enum class StatType : uint8_t { all = 0, large_pool = 1, small_pool = 2 };
inline constexpr const char* kStatTypeNames[] = {"all", "large_pool", "small_pool"};
using StatArray = std::array<Stat, 3>;

// X(name, unit) for stats kept per pool; unit is count or bytes.
#define HEADROOM_POOL_STATS(X)   \
  X(allocation, count)           \
  X(segment, count)              \
  X(active, count)               \
  X(inactive_split, count)       \
  X(allocated_bytes, bytes)      \
  X(reserved_bytes, bytes)       \
  X(active_bytes, bytes)         \
  X(inactive_split_bytes, bytes) \
  X(requested_bytes, bytes)

// X(name, unit) for stats kept once: blocks and segments of at least max_split_size.
#define HEADROOM_SINGLE_STATS(X) \
  X(oversize_allocations, count) \
  X(oversize_segments, count)

// X(name) for plain event counters.
#define HEADROOM_COUNTERS(X) \
  X(num_alloc_retries)       \
  X(num_ooms)                \
  X(num_sync_all_streams)    \
  X(num_device_alloc)        \
  X(num_device_free)

struct DeviceStats {
#define HEADROOM_DECLARE_POOL_STAT(name, unit) StatArray name;
  HEADROOM_POOL_STATS(HEADROOM_DECLARE_POOL_STAT)
#undef HEADROOM_DECLARE_POOL_STAT
#define HEADROOM_DECLARE_SINGLE_STAT(name, unit) Stat name;
  HEADROOM_SINGLE_STATS(HEADROOM_DECLARE_SINGLE_STAT)
#undef HEADROOM_DECLARE_SINGLE_STAT
#define HEADROOM_DECLARE_COUNTER(name) int64_t name = 0;
  HEADROOM_COUNTERS(HEADROOM_DECLARE_COUNTER)
#undef HEADROOM_DECLARE_COUNTER
  // The configured max_split_size in bytes; -1 when unlimited (PyTorch reports it the same way).
  int64_t max_split_size = -1;
  // headroom: allocated bytes per MemoryCategory now, and at the last moment allocated_bytes.all
  // stood at its peak (so they add up to the peak). Not in to_map(): PyTorch has no such keys.
  CategoryBytes category_current{};
  CategoryBytes category_at_peak{};

  // allocated / freed of every stat and the event counters back to 0, as
  // torch.cuda.reset_accumulated_memory_stats.
  void reset_accumulated();
  // peak = current for every stat, as torch.cuda.reset_peak_memory_stats (and the categories
  // at the peak are those of now).
  void reset_peak();

  // Flattened as torch.cuda.memory_stats() returns them, sorted by key:
  // "allocated_bytes.all.current", ..., "num_ooms", "oversize_segments.peak", ...
  std::map<std::string, int64_t> to_map() const;
};

}  // namespace headroom
