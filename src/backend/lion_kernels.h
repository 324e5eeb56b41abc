// Lion's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct LionKernels {
  static constexpr const char* kName = "lion";

  struct Coefficients {
    float decay;  // 1 - lr * weight_decay
    float lr;
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
  };

  // Lion (Note [Lion update]): param in its dtype (rounded to nearest when not f32), grad any
  // floating dtype, exp_avg f32.
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
              const Coefficients& c)>
      update{"update"};
};

}  // namespace headroom
