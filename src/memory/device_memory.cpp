// The per-device allocator registry and the torch.cuda-style memory functions.
#include "memory/device_memory.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/tensor.h"
#include "memory/memory_summary.h"

namespace headroom {
namespace {

struct Registry {
  std::mutex mutex;
  std::array<DeviceAllocatorFactory, kNumDeviceTypes> factories{};
  // Never destroyed: tensors may outlive static destruction order.
  std::map<std::pair<int, int>, CachingAllocator*> allocators;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

template <DeviceType kType>
Allocator& lookup(int index) {
  return caching_allocator(Device{kType, index});
}

const bool kRegistered = [] {
  register_allocator(DeviceType::cpu, lookup<DeviceType::cpu>);
  register_allocator(DeviceType::meta, lookup<DeviceType::meta>);
  register_allocator(DeviceType::cuda, lookup<DeviceType::cuda>);
  return true;
}();

}  // namespace

void register_device_allocator(DeviceType type, DeviceAllocatorFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[static_cast<size_t>(type)] = factory;
}

CachingAllocator& caching_allocator(Device device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto key = std::make_pair(static_cast<int>(device.type), device.index);
  auto it = r.allocators.find(key);
  if (it != r.allocators.end()) return *it->second;
  DeviceAllocatorFactory factory = r.factories[static_cast<size_t>(device.type)];
  if (!factory) {
    throw NotImplementedError(str_cat("device ", device, " is not available: this build has no ",
                                      device_type_name(device.type), " backend"));
  }
  auto* allocator = new CachingAllocator(factory(device.index));
  r.allocators.emplace(key, allocator);
  return *allocator;
}

std::vector<CachingAllocator*> caching_allocators() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<CachingAllocator*> out;
  for (auto& [key, allocator] : r.allocators) out.push_back(allocator);
  return out;
}

std::map<std::string, int64_t> memory_stats(Device device) {
  return caching_allocator(device).stats().to_map();
}

std::string memory_summary(Device device, bool abbreviated) {
  return format_memory_summary(memory_stats(device), device.str(), abbreviated);
}

size_t memory_allocated(Device device) {
  return static_cast<size_t>(caching_allocator(device).stats().allocated_bytes[0].current);
}

size_t max_memory_allocated(Device device) {
  return static_cast<size_t>(caching_allocator(device).stats().allocated_bytes[0].peak);
}

size_t memory_reserved(Device device) {
  return static_cast<size_t>(caching_allocator(device).stats().reserved_bytes[0].current);
}

size_t max_memory_reserved(Device device) {
  return static_cast<size_t>(caching_allocator(device).stats().reserved_bytes[0].peak);
}

void reset_peak_memory_stats(Device device) { caching_allocator(device).reset_peak_stats(); }

void reset_accumulated_memory_stats(Device device) {
  caching_allocator(device).reset_accumulated_stats();
}

void empty_cache(Device device) { caching_allocator(device).empty_cache(); }

void set_memory_limit(Device device, size_t bytes) {
  caching_allocator(device).set_memory_limit(bytes);
}

size_t memory_limit(Device device) { return caching_allocator(device).memory_limit(); }

StreamId current_stream(Device device) {
  return caching_allocator(device).device_allocator().current_stream();
}

StreamId copy_stream(Device device) {
  return caching_allocator(device).device_allocator().copy_stream();
}

void wait_stream(Device device, StreamId waiting, StreamId waited) {
  if (waiting == waited) return;
  DeviceAllocator& queues = caching_allocator(device).device_allocator();
  const EventId event = queues.record_event(waited);
  queues.wait_event(waiting, event);
  // The wait took the event's state when it was queued; the event itself may go.
  queues.destroy_event(event);
}

StreamGuard::StreamGuard(Device device, StreamId stream)
    : device_allocator_(caching_allocator(device).device_allocator()),
      previous_(device_allocator_.exchange_stream(stream)) {}

StreamGuard::~StreamGuard() { device_allocator_.exchange_stream(previous_); }

void tag_memory(const Tensor& tensor, MemoryCategory category) {
  if (!tensor.defined() || !tensor.storage() || !tensor.storage()->data()) return;
  caching_allocator(tensor.device()).set_category(tensor.storage()->data(), category);
}

}  // namespace headroom
