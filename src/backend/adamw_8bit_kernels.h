// bitsandbytes' Adam's kernel table (Note [Kernel tables] in backend/kernel_table.h): f32 or 8-bit
// blockwise states.
#pragma once

#include "backend/optimizer_coefficients.h"
#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// bitsandbytes' state block: one absmax per 256 elements of each state.
inline constexpr int64_t kAdam8bitBlockSize = 256;

struct AdamW8bitKernels {
  static constexpr const char* kName = "adamw_8bit";

  // f32 states (state1 / state2 f32); param and grad f32, bf16 or f16 (Note [bitsandbytes 16-bit
  // parameters] in backend/cpu/adamw_8bit.cpp).
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
              const BnbAdamCoefficients& c)>
      update_32bit{"update_32bit"};
  // 8-bit blockwise states (u8 with absmax f32 per kAdam8bitBlockSize block); param and grad f32,
  // bf16 or f16.
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
              const Tensor& absmax1, const Tensor& absmax2, const BnbAdamCoefficients& c)>
      update_8bit{"update_8bit"};
};

}  // namespace headroom
