// HostCachingAllocator: page-locked host memory kept for reuse, PyTorch's CachingHostAllocator
// (aten/src/ATen/core/CachingHostAllocator.h) over a DeviceAllocator that pins (cudaHostAlloc).
// Pinning is slow (the driver maps the pages for the GPU), so freed blocks are cached: requests
// round up to a power of two and a freed block serves the next request of its size. A block
// that queued work read (a non_blocking copy, or a record_stream) is reused only after the
// events recorded on those streams when it was freed have completed, as Note [Streams and
// reuse] (memory/caching_allocator.h) does for device memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "memory/device_allocator.h"
#include "memory/memory_stats.h"

namespace headroom {

// torch.cuda.host_memory_stats()'s figures.
struct HostStats {
  Stat allocation;       // blocks handed out (freed blocks waiting for events are not)
  Stat segment;          // blocks obtained from the driver, cached or not
  Stat allocated_bytes;  // of the blocks handed out, rounded sizes
  Stat reserved_bytes;   // of the segments
  int64_t num_host_alloc = 0;
  int64_t num_host_free = 0;

  // "allocation.current", "allocation.peak", ..., "num_host_alloc", "num_host_free".
  std::map<std::string, int64_t> to_map() const;
};

// The copy itself is the backend's: it implements copy_to_device_async with the device's
// asynchronous copy and record_stream on the source (backend/cuda/pinned_host_allocator.cpp).
class HostCachingAllocator : public PinnedAllocator {
 public:
  explicit HostCachingAllocator(std::unique_ptr<DeviceAllocator> host_memory);
  // Waits for pending events and returns every block, also those still in use.
  ~HostCachingAllocator() override;
  HostCachingAllocator(const HostCachingAllocator&) = delete;
  HostCachingAllocator& operator=(const HostCachingAllocator&) = delete;

  // OutOfMemoryError when the driver cannot pin more, even after the cache is returned.
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr) noexcept override;
  // `ptr` may point anywhere inside a live block; Error when it is not in one.
  void record_stream(void* ptr, StreamId stream) override;

  HostStats stats() const;
  // Returns the cached blocks to the driver; blocks still waiting for events stay.
  void empty_cache();

  // A power of two, at least 1.
  static size_t round_size(size_t nbytes);

 private:
  struct Block {
    uintptr_t ptr = 0;
    size_t size = 0;
    bool allocated = false;
    std::set<StreamId> streams;  // that used it since it was handed out
    int event_count = 0;         // events still pending since it was freed
  };

  void process_events();
  Block* block_containing(const void* ptr);
  void release_cached_blocks();

  mutable std::mutex mutex_;
  std::unique_ptr<DeviceAllocator> host_memory_;
  std::map<uintptr_t, std::unique_ptr<Block>> blocks_;  // every block, by address
  std::array<std::vector<Block*>, 64> free_blocks_;     // indexed by log2 of the size
  std::deque<std::pair<EventId, Block*>> events_;       // newest at the front
  HostStats stats_;
};

// The figures of the registered pinned allocator (Tensor::pin_memory's); empty in a build without
// one. host_empty_cache returns its cached blocks (torch._C._host_emptyCache).
std::map<std::string, int64_t> host_memory_stats();
void host_empty_cache();

}  // namespace headroom
