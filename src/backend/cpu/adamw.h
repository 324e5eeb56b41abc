// The fused AdamW update on contiguous fp32 CPU arrays: one pass reads p, g, m, v and writes p, m,
// v. optim/adamw.cpp computes the per-step coefficients and drives it.
#pragma once

#include <cstdint>

#include "backend/optimizer_coefficients.h"
#include "core/dtype.h"
#include "core/float_formats.h"
#include "core/philox.h"

namespace headroom::cpu {

using AdamWCoefficients = headroom::AdamWCoefficients;

// Updates n elements in place: OpenMP over large arrays, vectorised with FMA where the CPU has it.
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWCoefficients& c);

// AdamW on any mix of dtypes: parameters f32 / bf16 / f16, gradients f32 / bf16 / f16, states
// f32 or bf16. Loads widen to fp32 and the update runs in fp32 in the order of adamw_update;
// states are stored rounded to nearest. A low-precision parameter is written back
//   - with a Kahan compensation buffer (bf16, `compensation` not null), as optimi does:
//     c = comp + (p_new - p); p' = round_nearest(p + c); comp = round_nearest(c - (p' - p)),
//     so the bits that rounding loses are added back at later steps;
//   - else with stochastic rounding when `stochastic` (element i draws word i % 4 of
//     philox_block(rng.seed, rng.offset + i / 4), as the CUDA kernel will);
//   - else rounded to nearest.
struct AdamWTensors {
  void* param;
  DType param_dtype;
  const void* grad;
  DType grad_dtype;
  void* exp_avg;
  void* exp_avg_sq;
  DType state_dtype;
  BFloat16* compensation = nullptr;
  bool stochastic = false;
  PhiloxState rng = {};
};
void adamw_update_mixed(const AdamWTensors& t, int64_t n, const AdamWCoefficients& c);

}  // namespace headroom::cpu
