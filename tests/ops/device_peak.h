// The growth of a device's peak allocated bytes while a function runs: the measure by which the
// single-pattern tests compare a real CPU run with the meta device's dry run.
#pragma once

#include <cstdint>
#include <functional>

#include "core/device.h"
#include "memory/device_memory.h"

namespace headroom {

inline int64_t peak_growth_on(Device device, const std::function<void()>& fn) {
  const int64_t before = static_cast<int64_t>(memory_allocated(device));
  reset_peak_memory_stats(device);
  fn();
  return static_cast<int64_t>(max_memory_allocated(device)) - before;
}

}  // namespace headroom
