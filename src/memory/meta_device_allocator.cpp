// Raw "memory" for the meta device: address ranges from a counter, never backed and never
// reused, so every segment of a dry run has a distinct, realistic-looking address.
#include <atomic>

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

  DeviceMemoryInfo memory_info() const override { return {}; }

 private:
  std::atomic<uintptr_t> next_{kMetaBase};
};

}  // namespace

std::unique_ptr<DeviceAllocator> make_meta_device_allocator() {
  return std::make_unique<MetaDeviceAllocator>();
}

}  // namespace headroom
