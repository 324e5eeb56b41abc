// The growth of a device's peak allocated bytes while a function runs, and the check that the
// single-pattern tests make with it: a real CPU run allocates what the meta device's dry run
// plans (and the dry run is the same whichever device it stands in for: one code path).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <utility>

#include "core/device.h"
#include "memory/device_memory.h"

namespace headroom {

inline int64_t peak_growth_on(Device device, const std::function<void()>& fn) {
  const int64_t before = static_cast<int64_t>(memory_allocated(device));
  reset_peak_memory_stats(device);
  fn();
  return static_cast<int64_t>(max_memory_allocated(device)) - before;
}

// peaks(device) runs an op forward and backward on `device` and returns the two peak growths.
inline void expect_cpu_run_as_planned(
    const std::function<std::pair<int64_t, int64_t>(Device)>& peaks) {
  EXPECT_EQ(peaks(kCPU), peaks(kMeta));
}

}  // namespace headroom
