// Raw "memory" for the meta device: address ranges from a counter, never backed and never
// reused, so every segment of a dry run has a distinct, realistic-looking address. Expandable
// segments reserve ranges the same way; mapping and unmapping pages only counts.
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "memory/device_allocator.h"

namespace headroom {
namespace {

constexpr uintptr_t kMetaBase = uintptr_t{1} << 44;  // well away from null, below 2^53 for JS
constexpr size_t kMetaAlignment = 2u << 20;

class MetaDeviceAllocator final : public DeviceAllocator {
 public:
  Device device() const override { return kMeta; }

  void* raw_alloc(size_t size) override {
    const size_t rounded = (size + kMetaAlignment - 1) / kMetaAlignment * kMetaAlignment;
    return reinterpret_cast<void*>(next_.fetch_add(rounded));
  }

  void raw_free(void*, size_t) noexcept override {}

  bool supports_virtual_memory() const override { return true; }
  // A released reservation of the same size is handed out again: every dry run of a search
  // reserves anew, and fresh ranges would soon climb past 2^53, where memory_viz's JavaScript
  // numbers lose addresses.
  void* reserve_address_space(size_t size, size_t page_size) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = released_.begin(); it != released_.end(); ++it) {
      if (it->second == size && it->first % page_size == 0) {
        const uintptr_t start = it->first;
        released_.erase(it);
        return reinterpret_cast<void*>(start);
      }
    }
    const size_t rounded = (size + page_size - 1) / page_size * page_size;
    uintptr_t start = next_.fetch_add(rounded + page_size);
    start = (start + page_size - 1) / page_size * page_size;
    return reinterpret_cast<void*>(start);
  }
  void release_address_space(void* ptr, size_t size) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    released_.emplace_back(reinterpret_cast<uintptr_t>(ptr), size);
  }
  bool map_pages(void*, size_t, size_t) override { return true; }
  void unmap_pages(void*, size_t, size_t, StreamId) override {}

  DeviceMemoryInfo memory_info() const override { return {}; }

 private:
  std::atomic<uintptr_t> next_{kMetaBase};
  std::mutex mutex_;
  std::vector<std::pair<uintptr_t, size_t>> released_;  // reservations given back
};

}  // namespace

std::unique_ptr<DeviceAllocator> make_meta_device_allocator() {
  return std::make_unique<MetaDeviceAllocator>();
}

}  // namespace headroom
