// A dtype conversion that autograd sees: the gradient flows back converted to the input's dtype.
// Autocast inserts it before ops that run in another precision (ops/autocast.h).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace headroom {

// x converted to `dtype` (round to nearest even; see core/float_formats.h), recorded as
// ToCopyBackward when x requires grad. x itself (no copy, no node) when it already has `dtype`.
Tensor cast(const Tensor& x, DType dtype);

// cast(x, dtype) of every x (contiguous f32 / bf16 / f16 tensors of one device), the conversions
// made in one launch per list slice (Note [Tensor lists]) instead of one each: the same values,
// the same nodes.
std::vector<Tensor> cast_all(const std::vector<Tensor>& xs, DType dtype);

}  // namespace headroom
