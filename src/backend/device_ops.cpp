// The registry of the native devices' op tables (backend/device_ops.h).
#include "backend/device_ops.h"

#include <array>

namespace headroom {
namespace {

struct Tables {
  std::array<DeviceOps, kNumDeviceTypes> ops{};
  std::array<bool, kNumDeviceTypes> registered{};
};

Tables& tables() {
  static Tables t;
  return t;
}

}  // namespace

DeviceOps& mutable_device_ops(DeviceType type) {
  Tables& t = tables();
  t.registered[static_cast<size_t>(type)] = true;
  return t.ops[static_cast<size_t>(type)];
}

const DeviceOps* find_device_ops(DeviceType type) {
  const Tables& t = tables();
  const size_t i = static_cast<size_t>(type);
  return t.registered[i] ? &t.ops[i] : nullptr;
}

}  // namespace headroom
