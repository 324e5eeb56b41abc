// bitsandbytes' 4-bit data types and their 16 code values, as the 4-bit kernel tables (CPU and
// CUDA) and quant/ name them.
#pragma once

#include <array>
#include <cstdint>

#include "core/host_device.h"

namespace headroom {

enum class Quant4bitType : uint8_t { nf4, fp4 };

// bitsandbytes' get_4bit_type: NF4 ascending; FP4 (E2M1, bit 3 the sign) by its bit pattern,
// [0, 0.0625, 8, 12, 4, 6, 2, 3, -0, -0.0625, -8, -12, -4, -6, -2, -3] / 12 in fp32, where its
// "-0" is a Python int, so code 8 is +0.0 (the quant_map bitsandbytes saves says so too).
HEADROOM_HD inline float quant_4bit_code_value(Quant4bitType type, unsigned q) {
  constexpr float kNf4[16] = {-1.0f,
                              -0.6961928009986877f,
                              -0.5250730514526367f,
                              -0.39491748809814453f,
                              -0.28444138169288635f,
                              -0.18477343022823334f,
                              -0.09105003625154495f,
                              0.0f,
                              0.07958029955625534f,
                              0.16093020141124725f,
                              0.24611230194568634f,
                              0.33791524171829224f,
                              0.44070982933044434f,
                              0.5626170039176941f,
                              0.7229568362236023f,
                              1.0f};
  constexpr float kFp4[16] = {
      0.0f, 0.0625f / 12,  8.0f / 12,  12.0f / 12,  4.0f / 12,  6.0f / 12,  2.0f / 12,  3.0f / 12,
      0.0f, -0.0625f / 12, -8.0f / 12, -12.0f / 12, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};
  return type == Quant4bitType::nf4 ? kNf4[q & 15u] : kFp4[q & 15u];
}

// The 16 values (bitsandbytes' quant_map).
inline std::array<float, 16> quant_4bit_code(Quant4bitType type) {
  std::array<float, 16> code{};
  for (unsigned q = 0; q < 16; ++q) code[q] = quant_4bit_code_value(type, q);
  return code;
}

}  // namespace headroom
