// The element-wise arithmetic's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

enum class BinaryOp { add, sub, mul };

struct ElementwiseKernels {
  static constexpr const char* kName = "elementwise";

  // out = a op b; a and b have out's shape with any strides (zero strides from broadcasting).
  Kernel<void(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out)> binary{"binary"};
  // out = x * factor; out may be x itself.
  Kernel<void(const Tensor& x, float factor, const Tensor& out)> scale{"scale"};
  // dst[i] = src[i] converted to dst[i]'s dtype (f32 / bf16 / f16, rounded as Tensor::to
  // rounds), for contiguous pairs of one size, in one launch (Note [Tensor lists]): autocast's
  // casts of a forward's weights made together (ops/autocast.h).
  Kernel<void(TensorList src, TensorList dst)> cast_list{"cast_list"};
};

}  // namespace headroom
