// bitsandbytes' AdamW updates on the CPU: the 8-bit blockwise kernel (states as codes of the
// dynamic maps with an fp32 absmax per block of 256) and the 32-bit kernel it uses for small
// tensors. optim/adamw_8bit.cpp computes the coefficients and drives them.
#pragma once

#include <cstdint>

#include "backend/adamw_8bit_kernels.h"
#include "backend/cpu/blockwise_quant.h"
#include "backend/optimizer_coefficients.h"
#include "core/dtype.h"

namespace headroom::cpu {

using headroom::kAdam8bitBlockSize;

using BnbAdamCoefficients = headroom::BnbAdamCoefficients;

// The 32-bit update (kOptimizer32bit2State) of n elements in place; `param` and `grad` are f32,
// bf16 or f16 (a 16-bit parameter is widened a block at a time, updated in fp32 and rounded to
// nearest where bitsandbytes' kernels round it: Note [bitsandbytes 16-bit parameters]).
void bnb_adam32_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                       float* exp_avg, float* exp_avg_sq, int64_t n, const BnbAdamCoefficients& c);

// The 8-bit blockwise update (kOptimizerStatic8bit2StateBlockwise) of n elements in place:
// exp_avg as codes of `signed_map`, exp_avg_sq of `unsigned_map`, absmax1 / absmax2 one float per
// block of kAdam8bitBlockSize. OpenMP over blocks.
struct Adam8bitState {
  uint8_t* exp_avg;
  uint8_t* exp_avg_sq;
  float* absmax1;
  float* absmax2;
  const QuantizationMap* signed_map;
  const QuantizationMap* unsigned_map;
};
// The parameter and gradient dtypes as for bnb_adam32_update.
void bnb_adam8bit_blockwise_update(void* param, DType param_dtype, const void* grad,
                                   DType grad_dtype, const Adam8bitState& state, int64_t n,
                                   const BnbAdamCoefficients& c);

}  // namespace headroom::cpu
