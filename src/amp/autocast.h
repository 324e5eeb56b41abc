// The autocast region users open, as torch.autocast: inside it, ops run in the precision the
// policy table in ops/autocast.h gives them, and fp32 parameters are cast once per region.
#pragma once

#include <optional>

#include "core/autocast_mode.h"

namespace headroom {

class Autocast {
 public:
  // device_type: the device whose ops are autocast (the meta device too, for dry runs). dtype
  // bf16 or f16 (ValueError otherwise); by default bf16 on the CPU and the meta device, f16 on
  // CUDA, as torch's defaults. A disabled region changes nothing but still counts as a region
  // for the cast cache, as in torch.
  explicit Autocast(DeviceType device_type, std::optional<DType> dtype = std::nullopt,
                    bool enabled = true, bool cache_enabled = true);
  // Restores the previous state; the outermost region's exit clears the cast cache.
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceType device_type_;
  AutocastDeviceState previous_;
};

}  // namespace headroom
