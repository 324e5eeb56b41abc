// What a tensor needs from the memory layer: bytes on a device. The memory layer registers one
// Allocator per device type (its CachingAllocator); core only looks them up, so core does not
// depend on the allocator's policy.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace headroom {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nullptr for 0 bytes; throws OutOfMemoryError when the device cannot provide them.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
};

using AllocatorLookup = Allocator& (*)(int device_index);

void register_allocator(DeviceType type, AllocatorLookup lookup);

// The allocator serving `device`; NotImplementedError when none is registered for its type.
Allocator& allocator_for(Device device);

}  // namespace headroom
