// The softmax's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct SoftmaxKernels {
  static constexpr const char* kName = "softmax";

  // out = softmax over the middle dimension of x [outer, n, inner].
  Kernel<void(const Tensor& x, int64_t outer, int64_t n, int64_t inner, const Tensor& out)> forward{
      "forward"};
  Kernel<void(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n, int64_t inner,
              const Tensor& grad_x)>
      backward{"backward"};
};

}  // namespace headroom
