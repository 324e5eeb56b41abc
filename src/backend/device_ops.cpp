// The registry of the native devices' op tables (backend/device_ops.h).
#include "backend/device_ops.h"

#include <array>
#include <cstring>
#include <type_traits>

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

std::vector<std::string> missing_device_ops(const DeviceOps& ops) {
  // DeviceOps holds function pointers only (its nested types and constants take no space).
  static_assert(std::is_standard_layout_v<DeviceOps>);
  static_assert(sizeof(DeviceOps) % sizeof(void (*)()) == 0);
  constexpr size_t kEntries = sizeof(DeviceOps) / sizeof(void (*)());
  std::array<void (*)(), kEntries> entries;
  std::memcpy(entries.data(), &ops, sizeof(DeviceOps));
  std::vector<std::string> missing;
  for (size_t i = 0; i < kEntries; ++i) {
    if (!entries[i]) missing.push_back("entry " + std::to_string(i));
  }
  return missing;
}

}  // namespace headroom
