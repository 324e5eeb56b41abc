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
  // (optional) Marks the memory at `ptr` (as allocate returned it) as used by work queued on
  // `stream`, so that once deallocated it is not handed out again before that work has run
  // (Tensor::record_stream). The default suits a device with one queue: nothing to wait for.
  virtual void record_stream(void* ptr, StreamId stream) {
    (void)ptr;
    (void)stream;
  }
};

// Page-locked host memory, which a GPU reads without a staging copy, so a transfer from it can be
// queued and overlap other work (PyTorch's pinned memory). A backend that can pin registers one
// (CUDA: cudaHostAlloc under memory/host_caching_allocator.h); Tensor::pin_memory takes its
// storage from it.
class PinnedAllocator : public Allocator {
 public:
  // Queues a copy of `nbytes` from `src`, which lies in memory this allocator handed out, to
  // `dst` on `device` on that device's current stream, and returns before the copy has run. The
  // source memory is not handed out again until the copy is done.
  virtual void copy_to_device_async(void* dst, Device device, const void* src, size_t nbytes) = 0;
};

using AllocatorLookup = Allocator& (*)(int device_index);

void register_allocator(DeviceType type, AllocatorLookup lookup);

// The allocator serving `device`: the innermost UseAllocator's of this thread for the device's
// type, else the registered one; NotImplementedError when none is registered for its type.
Allocator& allocator_for(Device device);

// Makes `allocator` serve every new storage of `type` on this thread for a scope, as
// torch.cuda.use_mem_pool does: offload (memsave) runs the host's share of a step in it so that
// the tensors it makes come from the host pool, not from the compute device's allocator, even
// when the compute device is the CPU itself. Not owned; scopes nest.
class UseAllocator {
 public:
  UseAllocator(DeviceType type, Allocator& allocator);
  ~UseAllocator();
  UseAllocator(const UseAllocator&) = delete;
  UseAllocator& operator=(const UseAllocator&) = delete;

 private:
  DeviceType type_;
  Allocator* previous_;
};

// Installs the pinned host allocator (a backend at static initialisation; tests with a fake one)
// and returns the one it replaces. Not owned: it must outlive every tensor it backs.
PinnedAllocator* register_pinned_allocator(PinnedAllocator* allocator);
// Null in a build without a backend that pins host memory.
PinnedAllocator* pinned_allocator();

}  // namespace headroom
