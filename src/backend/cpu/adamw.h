// The fused AdamW update on contiguous fp32 CPU arrays: one pass reads p, g, m, v and writes p, m,
// v. optim/adamw.cpp computes the per-step coefficients and drives it.
#pragma once

#include <cstdint>

namespace headroom::cpu {

// The step's scalars, each rounded to float from the double the optimizer computes, as PyTorch
// turns its Python-float scalars into the tensor's dtype. See Note [AdamW order of operations].
struct AdamWCoefficients {
  float decay;                  // 1 - lr * weight_decay
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;          // -lr / (1 - beta1^step)
};

// Updates n elements in place: OpenMP over large arrays, vectorised with FMA where the CPU has it.
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWCoefficients& c);

}  // namespace headroom::cpu
