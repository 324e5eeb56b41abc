// Raw host memory for the CPU device: 2 MiB-aligned blocks, so segments can be backed by huge
// pages; free/total memory from /proc/meminfo.
#include <cstdlib>
#include <fstream>
#include <string>

#include "memory/device_allocator.h"

namespace headroom {
namespace {

constexpr size_t kSegmentAlignment = 2u << 20;

class CpuDeviceAllocator final : public DeviceAllocator {
 public:
  Device device() const override { return kCPU; }

  void* raw_alloc(size_t size) override {
    const size_t rounded = (size + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
    return std::aligned_alloc(kSegmentAlignment, rounded);
  }

  void raw_free(void* ptr, size_t) noexcept override { std::free(ptr); }

  DeviceMemoryInfo memory_info() const override {
    DeviceMemoryInfo info;
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    size_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit) {
      if (key == "MemTotal:") info.total = kib * 1024;
      if (key == "MemAvailable:") info.free = kib * 1024;
    }
    return info;
  }
};

}  // namespace

std::unique_ptr<DeviceAllocator> make_cpu_device_allocator() {
  return std::make_unique<CpuDeviceAllocator>();
}

}  // namespace headroom
