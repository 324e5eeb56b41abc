// SGD's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct SgdKernels {
  static constexpr const char* kName = "sgd";

  struct Coefficients {
    float neg_lr;
    float weight_decay;
    float momentum;
    float one_minus_dampening;
    bool nesterov;
  };

  // torch's SGD: param in its dtype (rounded to nearest when not f32), grad any floating dtype;
  // momentum_buffer f32, or undefined without momentum; `first`: the buffer becomes the decayed
  // gradient itself (torch.clone(d_p)).
  Kernel<void(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, bool first,
              const Coefficients& c)>
      update{"update"};
};

}  // namespace headroom
