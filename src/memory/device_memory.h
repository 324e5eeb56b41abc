// The user-facing memory functions, one CachingAllocator per device, named as torch.cuda's:
// memory_stats, memory_summary, memory_allocated, reset_peak_memory_stats, empty_cache, ...
// Backends register how their device gets raw memory; the allocators are created on first use.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "memory/caching_allocator.h"
#include "memory/device_allocator.h"
#include "memory/memory_category.h"

namespace headroom {

class Tensor;

using DeviceAllocatorFactory = std::unique_ptr<DeviceAllocator> (*)(int device_index);

// Called by a backend (at static initialisation) to provide raw memory for its device type.
void register_device_allocator(DeviceType type, DeviceAllocatorFactory factory);

// The device's allocator, created with HEADROOM_ALLOC_CONF and HEADROOM_MEMORY_LIMIT on first
// use and alive until the process ends.
CachingAllocator& caching_allocator(Device device);
// The allocators created so far, ordered cpu, cuda:0, cuda:1, ..., meta.
std::vector<CachingAllocator*> caching_allocators();

std::map<std::string, int64_t> memory_stats(Device device);
std::string memory_summary(Device device, bool abbreviated = false);
size_t memory_allocated(Device device);      // allocated_bytes.all.current
size_t max_memory_allocated(Device device);  // allocated_bytes.all.peak
size_t memory_reserved(Device device);       // reserved_bytes.all.current
size_t max_memory_reserved(Device device);   // reserved_bytes.all.peak
void reset_peak_memory_stats(Device device);
void reset_accumulated_memory_stats(Device device);
void empty_cache(Device device);
// Caps the device's reserved memory (0 removes the cap); see CachingAllocator::set_memory_limit.
void set_memory_limit(Device device, size_t bytes);
size_t memory_limit(Device device);

// The device's streams, named as torch.cuda's (see DeviceAllocator; on the CPU and meta every one
// is stream 0). The calling thread's current stream, on which tensors are allocated and work is
// queued; a stream for host-device transfers beside it.
StreamId current_stream(Device device);
StreamId copy_stream(Device device);
// Work queued on `waiting` from now on starts only after the work queued on `waited` so far has
// run (torch.cuda.Stream.wait_stream); the host does not wait.
void wait_stream(Device device, StreamId waiting, StreamId waited);

// Makes `stream` the calling thread's current stream of `device` for a scope (torch.cuda.stream).
class StreamGuard {
 public:
  StreamGuard(Device device, StreamId stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  DeviceAllocator& device_allocator_;
  StreamId previous_;
};

}  // namespace headroom

namespace headroom {

// Tags the memory of `tensor` (its whole storage) as `category` in its device's allocator, for
// the breakdown of the peak (Note [Memory breakdown at the peak]). No-op for an undefined tensor
// or one whose memory is not the allocator's.
void tag_memory(const Tensor& tensor, MemoryCategory category);

}  // namespace headroom
