// AdamW's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include "backend/optimizer_coefficients.h"
#include "backend/kernel_table.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace headroom {

struct AdamWKernels {
  static constexpr const char* kName = "adamw";

  // AdamW on a list of parameters in one launch (Note [Tensor lists] in backend/kernel_table.h)
  // that share one step's coefficients, the parameters' dtype and the states' dtype (f32 or
  // bf16); each gradient any floating dtype. compensations: one bf16 Kahan buffer per parameter,
  // or empty (none). stochastic: round each bf16 / f16 parameter stochastically with its rngs[i]
  // (rngs: one per parameter when stochastic, else empty).
  Kernel<void(TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
              TensorList compensations, bool stochastic, std::span<const PhiloxState> rngs,
              const AdamWCoefficients& c)>
      update{"update"};
};

}  // namespace headroom
