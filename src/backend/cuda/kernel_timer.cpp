// The CUDA backend's DeviceActivitySource (core/device_activity.h): while a profiler records, a
// pair of timing events on the calling thread's current stream around each kernel-table call and
// Tensor kernel, read once when recording stops. See Note [CUDA time in the profiler].
#include <cuda_runtime.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_stream.h"
#include "core/record_function.h"

namespace headroom::cuda {
namespace {

class KernelTimer final : public DeviceActivitySource, public KernelLaunchTimer {
 public:
  explicit KernelTimer(int device) : device_(device) {}

  ~KernelTimer() override {
    stop();
    // Pending events of a recording nobody collected are returned unread; no checks here, in a
    // destructor that may run as the process exits.
    for (Launch& launch : launches_) release(launch);
    for (cudaEvent_t event : free_) cudaEventDestroy(event);
    if (reference_) cudaEventDestroy(reference_);
  }

  // Synchronizes once, so that the reference event marks a moment when the device is idle, and
  // takes the host clock when that event has completed: a span's start is the host time of the
  // reference plus the device time elapsed since it (to within the wait's wake-up, microseconds).
  void start() override {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    HEADROOM_CUDA_CHECK(cudaDeviceSynchronize());
    if (!reference_) HEADROOM_CUDA_CHECK(cudaEventCreate(&reference_));
    HEADROOM_CUDA_CHECK(cudaEventRecord(reference_, current_stream()));
    HEADROOM_CUDA_CHECK(cudaEventSynchronize(reference_));
    reference_ns_ = record_clock_ns();
    for (Launch& launch : launches_) release(launch);
    launches_.clear();
    ++generation_;
    recording_ = true;
    exchange_kernel_launch_timer(this);
  }

  void stop() override {
    KernelLaunchTimer* self = this;
    detail::g_kernel_launch_timer.compare_exchange_strong(self, nullptr);
    std::lock_guard<std::mutex> lock(mutex_);
    recording_ = false;
  }

  // One synchronization for the whole recording, then the elapsed times of every pair.
  std::vector<DeviceActivity> collect() override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<DeviceActivity> spans;
    if (launches_.empty()) return spans;
    DeviceGuard guard(device_);
    HEADROOM_CUDA_CHECK(cudaDeviceSynchronize());
    spans.reserve(launches_.size());
    for (Launch& launch : launches_) {
      if (launch.ended) {
        float since_reference_ms = 0.0f, duration_ms = 0.0f;
        HEADROOM_CUDA_CHECK(cudaEventElapsedTime(&since_reference_ms, reference_, launch.start));
        HEADROOM_CUDA_CHECK(cudaEventElapsedTime(&duration_ms, launch.start, launch.end));
        const int64_t start_ns = reference_ns_ + std::llround(since_reference_ms * 1e6);
        spans.push_back({.name = std::string(launch.family) + "." + launch.entry,
                         .device = Device{DeviceType::cuda, device_},
                         .stream = stream_id(launch.stream),
                         .start_ns = start_ns,
                         .end_ns = start_ns + std::llround(duration_ms * 1e6),
                         .correlation_id = launch.correlation_id,
                         .thread_id = launch.thread_id,
                         .launch_ns = launch.launch_ns});
      }
      release(launch);
    }
    launches_.clear();
    ++generation_;
    return spans;
  }

  int64_t launch_begins(const KernelLaunchInfo& info) override {
    if (!info.device.is_cuda() || info.device.index != device_) return -1;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!recording_) return -1;
    Launch launch{.family = info.family,
                  .entry = info.entry,
                  .stream = current_stream(),
                  .correlation_id = ++correlation_ids_,
                  .thread_id = info.thread_id,
                  .launch_ns = info.launch_ns};
    // Events belong to the device current when they are made and recorded; a rank's thread
    // keeps device 0 current (kernels take their device in a scoped guard).
    DeviceGuard guard(device_);
    launch.start = acquire();
    launch.end = acquire();
    launches_.push_back(launch);
    HEADROOM_CUDA_CHECK(cudaEventRecord(launch.start, launch.stream));
    return (generation_ << 32) | static_cast<int64_t>(launches_.size() - 1);
  }

  void launch_ends(int64_t handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    // A recording restarted or collected since the launch began: its pair was released.
    const size_t index = static_cast<size_t>(handle & 0xffffffff);
    if ((handle >> 32) != generation_ || index >= launches_.size()) return;
    Launch& launch = launches_[index];
    if (launch.ended) return;
    DeviceGuard guard(device_);
    HEADROOM_CUDA_CHECK(cudaEventRecord(launch.end, launch.stream));
    launch.ended = true;
  }

 private:
  struct Launch {
    const char* family = "";
    const char* entry = "";
    cudaStream_t stream = nullptr;
    uint64_t correlation_id = 0;
    uint64_t thread_id = 0;
    int64_t launch_ns = 0;
    cudaEvent_t start = nullptr;
    cudaEvent_t end = nullptr;
    bool ended = false;
  };

  // Events are reused across recordings: a GPT-2 step times about 1,500 launches.
  cudaEvent_t acquire() {
    if (!free_.empty()) {
      cudaEvent_t event = free_.back();
      free_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    HEADROOM_CUDA_CHECK(cudaEventCreate(&event));
    return event;
  }

  void release(Launch& launch) {
    if (launch.start) free_.push_back(launch.start);
    if (launch.end) free_.push_back(launch.end);
    launch.start = launch.end = nullptr;
  }

  const int device_;
  std::mutex mutex_;
  bool recording_ = false;
  cudaEvent_t reference_ = nullptr;
  int64_t reference_ns_ = 0;
  int64_t generation_ = 0;  // recordings started: a handle's high bits
  uint64_t correlation_ids_ = 0;
  std::vector<Launch> launches_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace

std::shared_ptr<DeviceActivitySource> make_kernel_timer(int index) {
  return std::make_shared<KernelTimer>(index);
}

}  // namespace headroom::cuda
