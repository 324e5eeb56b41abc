// Pinned host memory for Tensor::pin_memory: cudaHostAlloc'ed blocks under the
// HostCachingAllocator, and the non_blocking host-to-device copy from them (cudaMemcpyAsync on the
// current stream, the source block held back from reuse until the copy has run), registered at
// start-up; the same memory backs offload's pinned host pool.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_stream.h"
#include "core/allocator.h"
#include "memory/host_caching_allocator.h"
#include "memory/host_pool.h"

namespace headroom::cuda {
namespace {

// Raw page-locked memory; events on the stream's own device (copies to any GPU read it).
class PinnedHostMemory final : public DeviceAllocator {
 public:
  Device device() const override { return kCPU; }

  void* raw_alloc(size_t size) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it so the allocator can return its cache and retry
      return nullptr;
    }
    HEADROOM_CUDA_CHECK(status);
    return ptr;
  }

  void raw_free(void* ptr, size_t) noexcept override { cudaFreeHost(ptr); }

  DeviceMemoryInfo memory_info() const override { return {}; }

  EventId record_event(StreamId stream) override {
    return cuda::record_event(stream_device(to_stream(stream)), to_stream(stream));
  }
  bool query_event(EventId event) override { return cuda::query_event(event); }
  void synchronize_event(EventId event) override { cuda::synchronize_event(event); }
  void destroy_event(EventId event) noexcept override { cuda::destroy_event(event); }
};

class CudaPinnedAllocator final : public HostCachingAllocator {
 public:
  CudaPinnedAllocator() : HostCachingAllocator(std::make_unique<PinnedHostMemory>()) {}

  void copy_to_device_async(void* dst, Device device, const void* src, size_t nbytes) override {
    DeviceGuard guard(device.index);
    cudaStream_t stream = current_stream();
    HEADROOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream));
    // The event that frees the block for reuse is recorded on this stream when it is freed.
    record_stream(const_cast<void*>(src), stream_id(stream));
  }
};

// Never destroyed: pinned tensors may outlive static destruction.
const bool kRegistered = (register_pinned_allocator(new CudaPinnedAllocator), true);
// The same memory for offload's pinned host pool (Note [The host pool]).
const bool kPoolRegistered =
    (register_pinned_host_memory([](int) -> std::unique_ptr<DeviceAllocator> {
       return std::make_unique<PinnedHostMemory>();
     }),
     true);

}  // namespace
}  // namespace headroom::cuda
