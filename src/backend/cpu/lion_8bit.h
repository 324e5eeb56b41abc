// bitsandbytes' Lion updates on the CPU: the 8-bit blockwise kernel (the momentum as codes of the
// signed dynamic map with an fp32 absmax per block of 256) and the 32-bit kernel it uses for small
// tensors. optim/lion_8bit.cpp computes the coefficients and drives them.
#pragma once

#include <cstdint>

#include "backend/optimizer_coefficients.h"
#include "backend/cpu/adamw_8bit.h"
#include "core/dtype.h"

namespace headroom::cpu {

using BnbLionCoefficients = headroom::BnbLionCoefficients;

// The 32-bit update (kOptimizer32bit1State, LION) of n elements in place, See Note [bitsandbytes
// Lion]; `param` and `grad` f32, bf16 or f16.
void bnb_lion32_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                       float* exp_avg, int64_t n, const BnbLionCoefficients& c);

// The 8-bit blockwise update (kOptimizerStatic8bit1StateBlockwise, LION) of n elements in place:
// exp_avg as codes of `signed_map` with one absmax per block of kAdam8bitBlockSize.
void bnb_lion8bit_blockwise_update(void* param, DType param_dtype, const void* grad,
                                   DType grad_dtype, uint8_t* exp_avg, float* absmax, int64_t n,
                                   const QuantizationMap& signed_map, const BnbLionCoefficients& c);

}  // namespace headroom::cpu
