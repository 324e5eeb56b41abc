// A stream held at one point of its queue by a host function that waits for the test, so that
// "not yet complete" is certain rather than a race (the stream and NCCL tests).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/device.h"

namespace headroom {

// Holds `stream` at this point of its queue until release(): work queued after it stays pending.
class StreamBlocker {
 public:
  explicit StreamBlocker(StreamId stream) : stream_(reinterpret_cast<cudaStream_t>(stream)) {
    const cudaError_t status = cudaLaunchHostFunc(
        stream_,
        [](void* flag) {
          while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
        },
        &released_);
    EXPECT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
  }
  // The host function reads the flag until it returns: wait for it before the flag goes.
  ~StreamBlocker() {
    release();
    cudaStreamSynchronize(stream_);
  }
  void release() { released_ = true; }

 private:
  cudaStream_t stream_;
  std::atomic<bool> released_{false};
};

}  // namespace headroom
