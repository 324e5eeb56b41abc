// Adafactor's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include <cstdint>

#include "backend/grad_check_kernels.h"
#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// The scalars workspace: i64 [adafactor_scalars(batch)] of doubles' bits (as norm_partial's); slots
// kAdafactorRms and kAdafactorRms + 1 end as the parameter's RMS before the step and lr_t, computed
// on the device from the coefficients, so no host read is needed.
inline constexpr int64_t kAdafactorRms = 2 * kNormPartialBlocks;
constexpr int64_t adafactor_scalars(int64_t batch) { return kAdafactorRms + 3 + batch; }

struct AdafactorKernels {
  static constexpr const char* kName = "adafactor";

  struct Coefficients {
    float beta2t, one_minus_beta2t;
    float eps1;
    float clip_threshold;
    double rho;   // lr, or the relative step
    double eps2;  // floor of the RMS in lr_t
    bool scale_parameter;
    double weight_decay;
    bool first_moment;
    float beta1, one_minus_beta1;
  };

  // Adafactor (Note [Adafactor step]) on one parameter: param f32 / bf16 (rounded to nearest), grad
  // any floating dtype, f32 states. Factored (param [batch, rows, cols] viewed so): row [batch,
  // rows], col [batch, cols], col_factor f32 [batch, cols] workspace; else exp_avg_sq of the
  // parameter's shape (row / col / col_factor undefined). exp_avg f32 or undefined (no beta1).
  // scalars: see adafactor_scalars.
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
              const Tensor& exp_avg_sq, const Tensor& row, const Tensor& col,
              const Tensor& col_factor, int64_t batch, int64_t rows, int64_t cols,
              const Tensor& scalars, const Coefficients& c)>
      update{"update"};
};

}  // namespace headroom
