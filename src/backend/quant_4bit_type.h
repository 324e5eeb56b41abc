// bitsandbytes' 4-bit data types, as the 4-bit kernel tables and quant/ name them.
#pragma once

#include <cstdint>

namespace headroom {

enum class Quant4bitType : uint8_t { nf4, fp4 };

}  // namespace headroom
