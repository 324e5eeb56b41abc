// Thread-local autocast state, as PyTorch keeps it per thread (autocast does not reach threads
// a region starts; our kernels' OpenMP threads never dispatch ops).
#include "core/autocast_mode.h"

namespace headroom {

namespace {
thread_local AutocastDeviceState states[kNumDeviceTypes];
thread_local int nesting_depth = 0;
}  // namespace

AutocastDeviceState AutocastMode::get(DeviceType type) { return states[static_cast<int>(type)]; }

void AutocastMode::set(DeviceType type, const AutocastDeviceState& state) {
  states[static_cast<int>(type)] = state;
}

bool AutocastMode::any_enabled() {
  for (const AutocastDeviceState& s : states) {
    if (s.enabled) return true;
  }
  return false;
}

int AutocastMode::increment_nesting() { return ++nesting_depth; }
int AutocastMode::decrement_nesting() { return --nesting_depth; }
int AutocastMode::nesting() { return nesting_depth; }

AutocastOffGuard::AutocastOffGuard() {
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    saved_[i] = states[i];
    states[i].enabled = false;
  }
}

AutocastOffGuard::~AutocastOffGuard() {
  for (int i = 0; i < kNumDeviceTypes; ++i) states[i] = saved_[i];
}

}  // namespace headroom
