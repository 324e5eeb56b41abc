// The thread-local autocast state: per device type, whether autocast is on and to which dtype.
// Ops read it (ops/autocast.h); the scope object users hold is amp/autocast.h.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/dtype.h"

namespace headroom {

struct AutocastDeviceState {
  bool enabled = false;
  DType dtype = DType::bf16;  // bf16 or f16
  bool cache_enabled = true;
};

class AutocastMode {
 public:
  static AutocastDeviceState get(DeviceType type);
  static void set(DeviceType type, const AutocastDeviceState& state);
  // True when autocast is on for any device type: the one check ops make on their fast path.
  static bool any_enabled();
  // Nesting depth of autocast regions on this thread (torch's autocast_increment_nesting);
  // the cast cache is cleared when the outermost region exits.
  static int increment_nesting();
  static int decrement_nesting();
  static int nesting();
};

// Turns autocast off for every device type in its scope and restores the states after. Backward
// runs under it: gradient ops compute in the dtypes autocast chose for the forward ops, never
// casting again.
class AutocastOffGuard {
 public:
  AutocastOffGuard();
  ~AutocastOffGuard();
  AutocastOffGuard(const AutocastOffGuard&) = delete;
  AutocastOffGuard& operator=(const AutocastOffGuard&) = delete;

 private:
  AutocastDeviceState saved_[kNumDeviceTypes];
};

}  // namespace headroom
