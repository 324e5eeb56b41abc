// The registry of per-device-type allocators.
#include "core/allocator.h"

#include <array>
#include <atomic>

#include "core/error.h"

namespace headroom {
namespace {

std::array<std::atomic<AllocatorLookup>, kNumDeviceTypes>& lookups() {
  static std::array<std::atomic<AllocatorLookup>, kNumDeviceTypes> table{};
  return table;
}

std::atomic<PinnedAllocator*>& pinned() {
  static std::atomic<PinnedAllocator*> allocator{nullptr};
  return allocator;
}

}  // namespace

void register_allocator(DeviceType type, AllocatorLookup lookup) {
  lookups()[static_cast<size_t>(type)].store(lookup);
}

Allocator& allocator_for(Device device) {
  AllocatorLookup lookup = lookups()[static_cast<size_t>(device.type)].load();
  if (!lookup) {
    throw NotImplementedError(str_cat("no allocator is registered for device ", device,
                                      " in this build"));
  }
  return lookup(device.index);
}

PinnedAllocator* register_pinned_allocator(PinnedAllocator* allocator) {
  return pinned().exchange(allocator);
}

PinnedAllocator* pinned_allocator() { return pinned().load(); }

}  // namespace headroom
