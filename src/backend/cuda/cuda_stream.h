// The calling thread's current stream and a guard that sets it for a scope (as
// torch.cuda.stream(s)), each device's copy stream, and pooled events: what kernels, the caching
// allocator, the pinned host allocator and the data loader's transfers share.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cuda_launch.h"
#include "memory/device_allocator.h"

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

// Makes `stream` the thread's current stream (what StreamGuard does for a scope) and returns the
// one it replaces. One current stream per thread, whichever device is current: headroom drives
// one GPU per process.
cudaStream_t exchange_stream(cudaStream_t stream);

// A stream handle as the device-independent StreamId (memory/device_allocator.h) and back; the
// legacy default stream is 0.
inline StreamId stream_id(cudaStream_t stream) { return reinterpret_cast<StreamId>(stream); }
inline cudaStream_t to_stream(StreamId id) { return reinterpret_cast<cudaStream_t>(id); }

// The device the stream belongs to (the current device for the legacy default stream).
int stream_device(cudaStream_t stream);

// Device `index`'s stream for host-device transfers: created on first use with
// cudaStreamNonBlocking, so that it does not wait for the legacy default stream, on which the
// compute kernels run unless a StreamGuard says otherwise; never destroyed.
cudaStream_t copy_stream(int index);

// Events without timing, as the EventIds of DeviceAllocator. Destroyed events go back to a pool
// of their device, so recording one costs no cudaEventCreate once the pool is warm (PyTorch's
// EventPool).
EventId record_event(int device, cudaStream_t stream);
bool query_event(EventId event);
void synchronize_event(EventId event);
void wait_event(cudaStream_t stream, EventId event);
void destroy_event(EventId event) noexcept;

}  // namespace headroom::cuda
