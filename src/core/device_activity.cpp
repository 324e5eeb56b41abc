// The registry of device activity sources and the launch-timing hook (core/device_activity.h).
#include "core/device_activity.h"

#include <array>
#include <cstdio>

#include "core/record_function.h"

namespace headroom {
namespace detail {
constinit std::atomic<KernelLaunchTimer*> g_kernel_launch_timer{nullptr};
}  // namespace detail

namespace {

std::array<DeviceActivitySourceFactory, kNumDeviceTypes>& source_factories() {
  static std::array<DeviceActivitySourceFactory, kNumDeviceTypes> factories{};
  return factories;
}

}  // namespace

void register_device_activity_source(DeviceType type, DeviceActivitySourceFactory factory) {
  source_factories()[static_cast<size_t>(type)] = factory;
}

std::shared_ptr<DeviceActivitySource> make_device_activity_source(Device device) {
  const DeviceActivitySourceFactory factory = source_factories()[static_cast<size_t>(device.type)];
  return factory ? factory(device.index) : nullptr;
}

KernelLaunchTimer* exchange_kernel_launch_timer(KernelLaunchTimer* timer) {
  return detail::g_kernel_launch_timer.exchange(timer);
}

namespace {
// Timed calls open on this thread: a call made inside a timed one (a kernel that copies) is part
// of the outer span, so that no device time is counted twice.
thread_local int t_open_timings = 0;
}  // namespace

void KernelLaunchTiming::begin(const char* family, const char* entry, Device device) {
  KernelLaunchTimer* timer = detail::g_kernel_launch_timer.load(std::memory_order_acquire);
  if (!timer || t_open_timings > 0) return;
  handle_ = timer->launch_begins({.family = family,
                                  .entry = entry,
                                  .device = device,
                                  .thread_id = current_thread_id(),
                                  .launch_ns = record_clock_ns()});
  if (handle_ >= 0) {
    timer_ = timer;
    ++t_open_timings;
  }
}

void KernelLaunchTiming::end() noexcept {
  --t_open_timings;
  // A destructor's work: a timer that cannot record the end loses this span, not the step.
  try {
    timer_->launch_ends(handle_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headroom: warning: a kernel's end was not timed: %s\n", e.what());
  }
}

}  // namespace headroom
