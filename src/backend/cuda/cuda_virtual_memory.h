// CUDA virtual memory management for expandable segments (Note [Expandable segments] in
// memory/caching_allocator.h): address space reserved with cuMemAddressReserve, pages created
// with cuMemCreate, mapped with cuMemMap and made accessible with cuMemSetAccess, and returned
// with cuMemUnmap / cuMemRelease. The driver API is loaded from libcuda at first use, as
// PyTorch's c10/cuda/driver_api does, so the build links the runtime only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace headroom::cuda {

// The pages of one device's expandable segments: one physical allocation per page, kept by
// address so that any page range can be unmapped again.
class VirtualMemory {
 public:
  explicit VirtualMemory(int device) : device_(device) {}
  ~VirtualMemory();  // releases what is still mapped and reserved
  VirtualMemory(const VirtualMemory&) = delete;
  VirtualMemory& operator=(const VirtualMemory&) = delete;

  // Whether the driver and the device support virtual memory management.
  bool supported() const;
  // Error naming the driver call when the driver refuses.
  void* reserve(size_t size, size_t page_size);
  void release(void* ptr, size_t size) noexcept;
  // False, with nothing left mapped, when the device is out of memory.
  bool map(void* ptr, size_t size, size_t page_size);
  void unmap(void* ptr, size_t size, size_t page_size) noexcept;

 private:
  int device_;
  std::mutex mutex_;
  std::map<uintptr_t, unsigned long long> pages_;  // page address -> physical handle
  std::map<uintptr_t, size_t> reservations_;       // base -> size
};

}  // namespace headroom::cuda
