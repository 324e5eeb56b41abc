// How a device obtains and returns raw memory (cudaMalloc, aligned host memory, fake address
// ranges for meta), and the little of its queues that the memory policy needs: which stream is
// current, and events that tell when work queued on a stream has run. Deliberately small: the
// caching policy, statistics and OOM handling live in CachingAllocator, once for all devices.
// Entries marked optional have defaults, which suit a device with one queue that runs work in
// order (the CPU, meta): there every event is complete as soon as it is recorded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace headroom {

// An event recorded on a stream (a CUDA event's handle); opaque outside its DeviceAllocator.
using EventId = uintptr_t;

struct DeviceMemoryInfo {
  size_t free = 0;   // what the device could still hand out
  size_t total = 0;  // its capacity; 0 where it has none (meta)
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual Device device() const = 0;
  // Exactly `size` bytes, or nullptr when the device has no more. Throws Error for any other
  // failure (a broken driver must not read as out-of-memory).
  virtual void* raw_alloc(size_t size) = 0;
  virtual void raw_free(void* ptr, size_t size) noexcept = 0;
  virtual DeviceMemoryInfo memory_info() const = 0;
  // (optional) Waits for all queued work before cached memory goes back to the device.
  virtual void synchronize() {}
  // (optional) The stream this thread allocates for and queues work on.
  virtual StreamId current_stream() const { return 0; }
  // (optional) Makes `stream` this thread's current stream and returns the one it replaces.
  virtual StreamId exchange_stream(StreamId stream) {
    (void)stream;
    return 0;
  }
  // (optional) A stream for transfers, beside the compute streams, so that copies overlap
  // kernels (created on first use, alive until the process ends).
  virtual StreamId copy_stream() { return 0; }

  // (optional) Events: a marker queued on `stream` that completes once the work queued on the
  // stream before it has run. Every event recorded is destroyed exactly once; query / wait /
  // synchronize take only events not yet destroyed.
  virtual EventId record_event(StreamId stream) {
    (void)stream;
    return 0;
  }
  // Whether the event has completed; never waits.
  virtual bool query_event(EventId event) {
    (void)event;
    return true;
  }
  // Blocks the calling thread until the event has completed.
  virtual void synchronize_event(EventId event) { (void)event; }
  // Work queued on `stream` from now on starts only once the event has completed; the host does
  // not wait.
  virtual void wait_event(StreamId stream, EventId event) {
    (void)stream;
    (void)event;
  }
  virtual void destroy_event(EventId event) noexcept { (void)event; }

  // (optional) Virtual memory, for expandable segments (Note [Expandable segments] in
  // memory/caching_allocator.h): address space with no memory behind it, into which pages of
  // memory are mapped and out of which they are unmapped again. Without these entries
  // expandable_segments:True is refused when the allocator starts.
  virtual bool supports_virtual_memory() const { return false; }
  // `size` bytes of address space, aligned to `page_size`; Error when there is none.
  virtual void* reserve_address_space(size_t size, size_t page_size) {
    (void)size;
    (void)page_size;
    return nullptr;
  }
  // Gives back a reservation whose pages are all unmapped.
  virtual void release_address_space(void* ptr, size_t size) noexcept {
    (void)ptr;
    (void)size;
  }
  // Backs [ptr, ptr + size) with memory, in pages of `page_size` (one physical allocation per
  // page, as PyTorch's cuMemCreate per page); the range lies in one reservation and is page
  // aligned. False, with nothing mapped, when the device has no more memory.
  virtual bool map_pages(void* ptr, size_t size, size_t page_size) {
    (void)ptr;
    (void)size;
    (void)page_size;
    return false;
  }
  // Returns the memory of the mapped pages in [ptr, ptr + size) to the device, once the work
  // queued on `stream` has run; the addresses stay reserved.
  virtual void unmap_pages(void* ptr, size_t size, size_t page_size, StreamId stream) {
    (void)ptr;
    (void)size;
    (void)page_size;
    (void)stream;
  }
};

// Aligned host memory.
std::unique_ptr<DeviceAllocator> make_cpu_device_allocator();
// Fake, never reused address ranges with no memory behind them.
std::unique_ptr<DeviceAllocator> make_meta_device_allocator();

}  // namespace headroom
