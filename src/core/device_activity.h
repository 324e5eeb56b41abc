// Device work seen by the profiler: the spans a device ran (DeviceActivity), the source that
// collects them (DeviceActivitySource, one per device backend that can time its work), and the
// hook through which every kernel-table call and Tensor kernel is timed while a source records.
// Device-neutral: a backend implements the source (backend/cuda/kernel_timer.cpp) and registers
// it with register_backend (backend/backend.h). See Note [CUDA time in the profiler]
// (profile/profiler.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace headroom {

// A span of device work (a kernel-table call's kernels, a Tensor copy) on one of its queues.
struct DeviceActivity {
  std::string name;  // "family.entry": "norm.layer_norm_forward", "tensor.copy"
  Device device;
  uint64_t stream = 0;   // StreamId; 0 the default queue
  int64_t start_ns = 0;  // record_clock_ns(), converted from the device's clock
  int64_t end_ns = 0;
  // The launch: unique among a recording's spans (a Chrome trace's flow id), and the host thread
  // and time (record_clock_ns()) of the call, which say what op launched it: the innermost scope
  // open on that thread at that time.
  uint64_t correlation_id = 0;
  uint64_t thread_id = 0;
  int64_t launch_ns = 0;
};

class DeviceActivitySource {
 public:
  virtual ~DeviceActivitySource() = default;
  virtual void start() = 0;  // recording begins
  virtual void stop() = 0;   // recording ends
  // The spans finished since start(), in launch order; called after stop().
  virtual std::vector<DeviceActivity> collect() = 0;
};

// A backend's source for device `index` (null: it cannot time that device).
using DeviceActivitySourceFactory = std::shared_ptr<DeviceActivitySource> (*)(int index);

// At static initialisation, by a backend's registration (backend/backend.h).
void register_device_activity_source(DeviceType type, DeviceActivitySourceFactory factory);

// A source that times the work of `device`, or null when its backend has none (the CPU, meta, a
// build without CUDA): the profiler then records no device activity.
std::shared_ptr<DeviceActivitySource> make_device_activity_source(Device device);

// One kernel-table call or Tensor kernel about to be queued.
struct KernelLaunchInfo {
  const char* family = "";
  const char* entry = "";
  Device device;
  uint64_t thread_id = 0;  // current_thread_id()
  int64_t launch_ns = 0;   // record_clock_ns()
};

// What a source implements to time launches: launch_begins before the call queues its work
// (e.g. records a start event on the current stream) and returns a handle, or a negative value
// for a launch it does not time (another device); launch_ends after the call returns. Called on
// the launching thread, from any thread that launches.
class KernelLaunchTimer {
 public:
  virtual ~KernelLaunchTimer() = default;
  virtual int64_t launch_begins(const KernelLaunchInfo& launch) = 0;
  virtual void launch_ends(int64_t handle) = 0;
};

namespace detail {
extern std::atomic<KernelLaunchTimer*> g_kernel_launch_timer;
}  // namespace detail

// Whether a timer is installed: one relaxed load, so every launch can ask.
inline bool kernel_launch_timer_open() {
  return detail::g_kernel_launch_timer.load(std::memory_order_relaxed) != nullptr;
}

// Installs `timer` (one at a time, process-wide: one profiler records device work) and returns the
// one it replaces; null uninstalls. A timer must stay alive until a launch already past its
// kernel_launch_timer_open() check has ended: sources are kept by the profiler until it is gone.
KernelLaunchTimer* exchange_kernel_launch_timer(KernelLaunchTimer* timer);

// Times the launches queued during its lifetime as one span named family.entry, when a timer is
// installed; otherwise one relaxed load.
class KernelLaunchTiming {
 public:
  KernelLaunchTiming(const char* family, const char* entry, Device device) {
    if (kernel_launch_timer_open()) [[unlikely]]
      begin(family, entry, device);
  }
  ~KernelLaunchTiming() {
    if (timer_) [[unlikely]]
      end();
  }
  KernelLaunchTiming(const KernelLaunchTiming&) = delete;
  KernelLaunchTiming& operator=(const KernelLaunchTiming&) = delete;

 private:
  void begin(const char* family, const char* entry, Device device);
  void end() noexcept;

  KernelLaunchTimer* timer_ = nullptr;
  int64_t handle_ = -1;
};

}  // namespace headroom
