// Device naming and parsing.
#include "core/device.h"

#include <charconv>

#include "core/device_kernels.h"
#include "core/error.h"

namespace headroom {

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu:
      return "cpu";
    case DeviceType::cuda:
      return "cuda";
    case DeviceType::meta:
      return "meta";
  }
  return "?";
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return kCPU;
  if (text == "meta") return kMeta;
  if (text == "cuda") return Device{DeviceType::cuda, 0};
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0 &&
        !digits.empty()) {
      return Device{DeviceType::cuda, index};
    }
  }
  throw ValueError(str_cat("unknown device '", text, "': expected cpu, meta, cuda or cuda:N"));
}

std::string Device::str() const {
  if (type == DeviceType::cuda) return str_cat("cuda:", index);
  return device_type_name(type);
}

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

int cuda_device_count() {
  const DeviceKernels* cuda = find_device_kernels(DeviceType::cuda);
  return cuda && cuda->device_count ? cuda->device_count() : 0;
}

bool cuda_is_available() { return cuda_device_count() > 0; }

}  // namespace headroom
