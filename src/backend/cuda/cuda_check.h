// Error checking for CUDA runtime calls, and a guard that makes a device current for a scope.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define HEADROOM_CUDA_CHECK(expr)                                                                \
  do {                                                                                           \
    const cudaError_t headroom_cuda_status = (expr);                                             \
    if (headroom_cuda_status != cudaSuccess) {                                                   \
      throw ::headroom::Error(::headroom::str_cat(#expr, " failed at ", __FILE__, ":", __LINE__, \
                                                  ": ",                                          \
                                                  cudaGetErrorString(headroom_cuda_status)));    \
    }                                                                                            \
  } while (0)

namespace headroom::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    HEADROOM_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) HEADROOM_CUDA_CHECK(cudaSetDevice(index));
    index_ = index;
  }
  ~DeviceGuard() {
    if (previous_ != index_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int index_ = 0;
};

// GPUs usable by this process; 0 without a driver or device (no exception).
int device_count();

}  // namespace headroom::cuda
