// Raw GPU memory for the CachingAllocator: cudaMalloc / cudaFree on the tensor's device, the
// device's real free and total memory from cudaMemGetInfo for the OOM report.
#include "backend/cuda/cuda_check.h"
#include "memory/device_allocator.h"
#include "memory/device_memory.h"

namespace headroom::cuda {
namespace {

class CudaDeviceAllocator final : public DeviceAllocator {
 public:
  explicit CudaDeviceAllocator(int index) : index_(index) {}

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

 private:
  int index_;
};

std::unique_ptr<DeviceAllocator> make_cuda_device_allocator(int index) {
  const int count = device_count();
  if (index < 0 || index >= count) {
    throw ValueError(str_cat("device cuda:", index, " is not available: ", count,
                             count == 1 ? " GPU is" : " GPUs are", " present"));
  }
  return std::make_unique<CudaDeviceAllocator>(index);
}

const bool kRegistered = (register_device_allocator(DeviceType::cuda, make_cuda_device_allocator), true);

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace headroom::cuda
