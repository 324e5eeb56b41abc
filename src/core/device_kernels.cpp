// The registry of per-device-type kernel tables.
#include "core/device_kernels.h"

#include <array>
#include <atomic>

#include "core/error.h"

namespace headroom {
namespace {

std::array<std::atomic<const DeviceKernels*>, kNumDeviceTypes>& tables() {
  static std::array<std::atomic<const DeviceKernels*>, kNumDeviceTypes> table{};
  return table;
}

}  // namespace

void register_device_kernels(DeviceType type, const DeviceKernels* kernels) {
  tables()[static_cast<size_t>(type)].store(kernels);
}

const DeviceKernels* find_device_kernels(DeviceType type) {
  return tables()[static_cast<size_t>(type)].load();
}

bool device_has_op_kernels(DeviceType type) {
  const DeviceKernels* kernels = find_device_kernels(type);
  return kernels && kernels->has_op_kernels;
}

const DeviceKernels& device_kernels(Device device) {
  const DeviceKernels* kernels = find_device_kernels(device.type);
  if (!kernels) {
    throw NotImplementedError(str_cat("device ", device, " has no kernels in this build",
                                      device.is_cuda() ? " (built without CUDA)" : ""));
  }
  return *kernels;
}

}  // namespace headroom
