// The calling thread's current CUDA stream, the copy streams and the event pool.
#include "backend/cuda/cuda_stream.h"

#include <map>
#include <mutex>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace headroom::cuda {
namespace {

thread_local cudaStream_t t_current_stream = nullptr;  // the legacy default stream

struct PooledEvent {
  cudaEvent_t event = nullptr;
  int device = 0;
};

// Events are never cudaEventDestroy'ed: a destroyed EventId goes back to its device's list.
struct EventPool {
  std::mutex mutex;
  std::map<int, std::vector<PooledEvent*>> free_by_device;
};

EventPool& event_pool() {
  static EventPool* pool = new EventPool;  // outlives every allocator's static destruction
  return *pool;
}

PooledEvent* as_event(EventId event) { return reinterpret_cast<PooledEvent*>(event); }

}  // namespace

cudaStream_t current_stream() { return t_current_stream; }

cudaStream_t exchange_stream(cudaStream_t stream) {
  cudaStream_t previous = t_current_stream;
  t_current_stream = stream;
  return previous;
}

StreamGuard::StreamGuard(cudaStream_t stream) : previous_(exchange_stream(stream)) {}

StreamGuard::~StreamGuard() { t_current_stream = previous_; }

int stream_device(cudaStream_t stream) {
  int device = 0;
  if (stream == nullptr) {
    HEADROOM_CUDA_CHECK(cudaGetDevice(&device));
  } else {
    HEADROOM_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  }
  return device;
}

cudaStream_t copy_stream(int index) {
  static std::mutex mutex;
  static auto* streams = new std::map<int, cudaStream_t>;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams->find(index);
  if (it != streams->end()) return it->second;
  DeviceGuard guard(index);
  cudaStream_t stream = nullptr;
  HEADROOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  streams->emplace(index, stream);
  return stream;
}

EventId record_event(int device, cudaStream_t stream) {
  PooledEvent* event = nullptr;
  {
    EventPool& pool = event_pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    std::vector<PooledEvent*>& free = pool.free_by_device[device];
    if (!free.empty()) {
      event = free.back();
      free.pop_back();
    }
  }
  DeviceGuard guard(device);
  if (!event) {
    event = new PooledEvent{nullptr, device};
    const cudaError_t status = cudaEventCreateWithFlags(&event->event, cudaEventDisableTiming);
    if (status != cudaSuccess) delete event;
    HEADROOM_CUDA_CHECK(status);
  }
  const cudaError_t status = cudaEventRecord(event->event, stream);
  if (status != cudaSuccess) destroy_event(reinterpret_cast<EventId>(event));
  HEADROOM_CUDA_CHECK(status);
  return reinterpret_cast<EventId>(event);
}

bool query_event(EventId event) {
  const cudaError_t status = cudaEventQuery(as_event(event)->event);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it, as PyTorch does
    return false;
  }
  HEADROOM_CUDA_CHECK(status);
  return true;
}

void synchronize_event(EventId event) {
  HEADROOM_CUDA_CHECK(cudaEventSynchronize(as_event(event)->event));
}

void wait_event(cudaStream_t stream, EventId event) {
  HEADROOM_CUDA_CHECK(cudaStreamWaitEvent(stream, as_event(event)->event, 0));
}

void destroy_event(EventId event) noexcept {
  PooledEvent* pooled = as_event(event);
  EventPool& pool = event_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  pool.free_by_device[pooled->device].push_back(pooled);  // std::bad_alloc here ends the process
}

void check_kernel_dtype(const char* op, const char* argument, DType dtype) {
  if (dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16) return;
  throw ValueError(str_cat(op, ": ", argument, " has dtype ", dtype_name(dtype),
                           "; the CUDA kernels take f32, bf16 or f16"));
}

}  // namespace headroom::cuda
