// LOMO's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct LomoKernels {
  static constexpr const char* kName = "lomo";

  struct Coefficients {
    float lr;
    bool decay;
    float decay_factor;  // 1 - lr * weight_decay
    bool clip_value;
    float clip_grad_value;
  };

  // LOMO's fused update (Lomo.fuse_update): param f32 / bf16 (rounded to nearest), grad any
  // floating dtype; clip_factor: norm_combine's result, whose element 1 (the clip factor) is read
  // on the device, or undefined for no norm clipping.
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& clip_factor,
              const Coefficients& c)>
      update{"update"};
};

}  // namespace headroom
