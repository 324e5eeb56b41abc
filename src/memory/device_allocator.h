// How a device obtains and returns raw memory (cudaMalloc, aligned host memory, fake address
// ranges for meta). Deliberately small: the caching policy, statistics and OOM handling live in
// CachingAllocator, once for all devices. Entries marked optional have defaults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace headroom {

// A device queue (CUDA stream); 0 on devices with a single queue.
using StreamId = uint64_t;

struct DeviceMemoryInfo {
  size_t free = 0;   // what the device could still hand out
  size_t total = 0;  // its capacity; 0 where it has none (meta)
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual Device device() const = 0;
  // Exactly `size` bytes, or nullptr when the device has no more. Throws Error for any other
  // failure (a broken driver must not read as out-of-memory).
  virtual void* raw_alloc(size_t size) = 0;
  virtual void raw_free(void* ptr, size_t size) noexcept = 0;
  virtual DeviceMemoryInfo memory_info() const = 0;
  // (optional) Waits for all queued work before cached memory goes back to the device.
  virtual void synchronize() {}
  // (optional) The stream this thread allocates for.
  virtual StreamId current_stream() const { return 0; }
};

// Aligned host memory.
std::unique_ptr<DeviceAllocator> make_cpu_device_allocator();
// Fake, never reused address ranges with no memory behind them.
std::unique_ptr<DeviceAllocator> make_meta_device_allocator();

}  // namespace headroom
