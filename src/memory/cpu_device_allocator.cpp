// Raw host memory for the CPU device: 2 MiB-aligned blocks, so segments can be backed by huge
// pages; free/total memory from /proc/meminfo. Expandable segments reserve address space with
// mmap(PROT_NONE) and commit pages with mprotect, returning them with madvise(MADV_DONTNEED).
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"
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

  bool supports_virtual_memory() const override { return true; }

  void* reserve_address_space(size_t size, size_t page_size) override {
    // Over-reserve by a page so the reservation can start on a page boundary.
    const size_t span = size + page_size;
    void* raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
      throw Error(str_cat("cpu: cannot reserve ", size,
                          " bytes of address space for an "
                          "expandable segment: ",
                          std::strerror(errno)));
    }
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + page_size - 1) / page_size * page_size;
    // Trim the unaligned head and the tail beyond the reservation.
    if (aligned > start) munmap(raw, aligned - start);
    const size_t tail = start + span - (aligned + size);
    if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
    return reinterpret_cast<void*>(aligned);
  }

  void release_address_space(void* ptr, size_t size) noexcept override { munmap(ptr, size); }

  bool map_pages(void* ptr, size_t size, size_t) override {
    if (mprotect(ptr, size, PROT_READ | PROT_WRITE) == 0) return true;
    if (errno == ENOMEM || errno == EAGAIN) return false;
    throw Error(
        str_cat("cpu: mprotect of ", size, " bytes at ", ptr, " failed: ", std::strerror(errno)));
  }

  void unmap_pages(void* ptr, size_t size, size_t, StreamId) override {
    // The pages' memory goes back to the system now; the addresses stay reserved.
    madvise(ptr, size, MADV_DONTNEED);
    mprotect(ptr, size, PROT_NONE);
  }

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
