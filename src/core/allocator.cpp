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

// UseAllocator's scopes, per device type, on this thread.
thread_local std::array<Allocator*, kNumDeviceTypes> t_scoped{};

}  // namespace

UseAllocator::UseAllocator(DeviceType type, Allocator& allocator)
    : type_(type), previous_(t_scoped[static_cast<size_t>(type)]) {
  t_scoped[static_cast<size_t>(type)] = &allocator;
}

UseAllocator::~UseAllocator() { t_scoped[static_cast<size_t>(type_)] = previous_; }

void register_allocator(DeviceType type, AllocatorLookup lookup) {
  lookups()[static_cast<size_t>(type)].store(lookup);
}

Allocator& allocator_for(Device device) {
  if (Allocator* scoped = t_scoped[static_cast<size_t>(device.type)]) return *scoped;
  AllocatorLookup lookup = lookups()[static_cast<size_t>(device.type)].load();
  if (!lookup) {
    throw NotImplementedError(
        str_cat("no allocator is registered for device ", device, " in this build"));
  }
  return lookup(device.index);
}

PinnedAllocator* register_pinned_allocator(PinnedAllocator* allocator) {
  return pinned().exchange(allocator);
}

PinnedAllocator* pinned_allocator() { return pinned().load(); }

}  // namespace headroom
