// Autocast regions: state on entry, restore and cache clearing on exit.
#include "amp/autocast.h"

#include "core/error.h"
#include "ops/autocast.h"

namespace headroom {

Autocast::Autocast(DeviceType device_type, std::optional<DType> dtype, bool enabled,
                   bool cache_enabled)
    : device_type_(device_type), previous_(AutocastMode::get(device_type)) {
  const DType target = dtype.value_or(device_type == DeviceType::cuda ? DType::f16 : DType::bf16);
  if (target != DType::bf16 && target != DType::f16) {
    throw ValueError(str_cat("autocast: dtype ", dtype_name(target), " for ",
                             device_type_name(device_type), "; only bf16 and f16 are supported"));
  }
  AutocastMode::set(device_type,
                    {.enabled = enabled, .dtype = target, .cache_enabled = cache_enabled});
  AutocastMode::increment_nesting();
}

Autocast::~Autocast() {
  AutocastMode::set(device_type_, previous_);
  if (AutocastMode::decrement_nesting() == 0) clear_autocast_cache();
}

}  // namespace headroom
