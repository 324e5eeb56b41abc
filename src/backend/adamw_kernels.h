// AdamW's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include "backend/cpu/adamw.h"
#include "backend/kernel_table.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace headroom {

struct AdamWKernels {
  static constexpr const char* kName = "adamw";

  // AdamW on one parameter: param in its dtype, grad any floating dtype, states f32 or bf16
  // (compensation: bf16 Kahan buffer or undefined; stochastic: round a bf16 param stochastically
  // with rng).
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
              const Tensor& exp_avg_sq, const Tensor& compensation, bool stochastic,
              PhiloxState rng, const cpu::AdamWCoefficients& c)>
      update{"update"};
};

}  // namespace headroom
