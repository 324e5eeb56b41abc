// The host pool: where offload (memsave) keeps what it moves off the compute device — optimizer
// states, master weights, gradients, saved activations, parameters. A CachingAllocator of its
// own, so its statistics (memory_stats / memory_summary, host_peak_allocated_bytes) sit beside
// the compute device's and the planner predicts both. See Note [The host pool].
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/allocator.h"
#include "core/device.h"
#include "memory/caching_allocator.h"
#include "memory/device_memory.h"

namespace headroom {

// Note [The host pool]
// Offload moves tensors from the compute device to host memory. On a GPU the host pool holds
// host memory (page-locked with pin_memory, which a backend provides through
// register_pinned_host_memory); on a machine without a GPU the compute device is the CPU itself
// and the pool is a second allocator over CPU memory, so the moves, the accounting and the
// device pool's drop are exercised there exactly as they are on a GPU; in a dry run (compute
// device meta) the pool hands out meta addresses. Tensors in the pool are on the host device
// (host_pool_device: the CPU, or meta in a dry run); work on them runs under the pool's scope
// (HostPoolScope), so that what it allocates comes from the pool too. The pool has no capacity
// limit (HEADROOM_MEMORY_LIMIT caps the compute device) and follows HEADROOM_ALLOC_CONF as
// every CachingAllocator does.

// The device the pool's tensors live on for compute device `compute`: meta for meta, else the CPU.
Device host_pool_device(Device compute);

// The pool for `compute`, created on first use and alive until the process ends: one for meta,
// one of pageable host memory, and (`pin_memory` with a GPU compute device and a backend that
// pins) one of page-locked host memory.
CachingAllocator& host_pool(Device compute, bool pin_memory = false);

// Called by a backend at static initialisation: raw page-locked host memory for the pinned pool.
void register_pinned_host_memory(DeviceAllocatorFactory factory);

// Every tensor made on the pool's device in this scope, on this thread, comes from `pool`.
class HostPoolScope {
 public:
  HostPoolScope(Device compute, CachingAllocator& pool)
      : scope_(host_pool_device(compute).type, pool) {}

 private:
  UseAllocator scope_;
};

// torch.cuda.host_memory_stats()-style names, as memory_stats(): the pool's figures
// ("allocated_bytes.all.peak", ...), and its memory_summary() titled "host pool (<device>)".
std::map<std::string, int64_t> host_pool_stats(const CachingAllocator& pool);
std::string host_pool_summary(const CachingAllocator& pool, bool abbreviated = false);

}  // namespace headroom
