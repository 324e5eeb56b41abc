// Raw GPU memory for the CachingAllocator: cudaMalloc / cudaFree on the tensor's device, the
// device's real free and total memory from cudaMemGetInfo for the OOM report, the streams and
// events of backend/cuda/cuda_stream.h for its per-stream pools (Note [Streams and reuse]), and
// the driver's virtual memory for expandable segments (backend/cuda/cuda_virtual_memory.h).
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_stream.h"
#include "backend/cuda/cuda_virtual_memory.h"
#include "memory/device_allocator.h"
#include "memory/device_memory.h"

namespace headroom::cuda {
namespace {

class CudaDeviceAllocator final : public DeviceAllocator {
 public:
  explicit CudaDeviceAllocator(int index) : index_(index), virtual_memory_(index) {}

  Device device() const override { return Device{DeviceType::cuda, index_}; }

  void* raw_alloc(size_t size) override {
    DeviceGuard guard(index_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky error so the caching allocator can retry
      return nullptr;
    }
    HEADROOM_CUDA_CHECK(status);
    return ptr;
  }

  void raw_free(void* ptr, size_t) noexcept override {
    // No DeviceGuard: it throws, and freeing must not.
    int previous = index_;
    cudaGetDevice(&previous);
    if (previous != index_) cudaSetDevice(index_);
    cudaFree(ptr);
    if (previous != index_) cudaSetDevice(previous);
  }

  DeviceMemoryInfo memory_info() const override {
    DeviceGuard guard(index_);
    DeviceMemoryInfo info;
    HEADROOM_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
    return info;
  }

  void synchronize() override {
    DeviceGuard guard(index_);
    HEADROOM_CUDA_CHECK(cudaDeviceSynchronize());
  }

  StreamId current_stream() const override { return stream_id(cuda::current_stream()); }
  StreamId exchange_stream(StreamId stream) override {
    return stream_id(cuda::exchange_stream(to_stream(stream)));
  }
  StreamId copy_stream() override { return stream_id(cuda::copy_stream(index_)); }

  EventId record_event(StreamId stream) override {
    return cuda::record_event(index_, to_stream(stream));
  }
  bool query_event(EventId event) override { return cuda::query_event(event); }
  void synchronize_event(EventId event) override { cuda::synchronize_event(event); }
  void wait_event(StreamId stream, EventId event) override {
    DeviceGuard guard(index_);  // stream 0 is the legacy default stream of the current device
    cuda::wait_event(to_stream(stream), event);
  }
  void destroy_event(EventId event) noexcept override { cuda::destroy_event(event); }

  bool supports_virtual_memory() const override { return virtual_memory_.supported(); }
  void* reserve_address_space(size_t size, size_t page_size) override {
    DeviceGuard guard(index_);
    return virtual_memory_.reserve(size, page_size);
  }
  void release_address_space(void* ptr, size_t size) noexcept override {
    virtual_memory_.release(ptr, size);
  }
  bool map_pages(void* ptr, size_t size, size_t page_size) override {
    DeviceGuard guard(index_);
    return virtual_memory_.map(ptr, size, page_size);
  }
  void unmap_pages(void* ptr, size_t size, size_t page_size, StreamId stream) override {
    // Unlike cudaFree, cuMemUnmap does not wait for the kernels that may still use the pages.
    DeviceGuard guard(index_);
    HEADROOM_CUDA_CHECK(cudaStreamSynchronize(to_stream(stream)));
    virtual_memory_.unmap(ptr, size, page_size);
  }

 private:
  int index_;
  VirtualMemory virtual_memory_;
};

}  // namespace

std::unique_ptr<DeviceAllocator> make_device_allocator(int index) {
  const int count = device_count();
  if (index < 0 || index >= count) {
    throw ValueError(str_cat("device cuda:", index, " is not available: ", count,
                             count == 1 ? " GPU is" : " GPUs are", " present"));
  }
  return std::make_unique<CudaDeviceAllocator>(index);
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace headroom::cuda
