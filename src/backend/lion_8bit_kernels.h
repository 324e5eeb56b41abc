// bitsandbytes' Lion's kernel table (Note [Kernel tables] in backend/kernel_table.h): f32 or 8-bit
// blockwise state, for optim/lion_8bit.h.
#pragma once

#include "backend/optimizer_coefficients.h"
#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct Lion8bitKernels {
  static constexpr const char* kName = "lion_8bit";

  // f32 state (kOptimizer32bit1State); param and grad f32, bf16 or f16.
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& state1,
              const BnbLionCoefficients& c)>
      update_32bit{"update_32bit"};
  // 8-bit blockwise state (u8 codes of the signed dynamic map, absmax f32 per kAdam8bitBlockSize
  // block; kOptimizerStatic8bit1StateBlockwise); param and grad f32, bf16 or f16.
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& absmax1,
              const BnbLionCoefficients& c)>
      update_8bit{"update_8bit"};
};

}  // namespace headroom
