// The current stream of the calling thread, and a guard that sets it for a scope (as
// torch.cuda.stream(s)). Kernels and the caching allocator both read it.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cuda_launch.h"

namespace headroom::cuda {

class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace headroom::cuda
