// Sums and means, with backward. Results keep the input's dtype (computed in fp32 / double).
#pragma once

#include "core/tensor.h"

namespace headroom {

// Over every element: a 0-d tensor.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
// Over one dimension.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums a broadcast result back to `shape` (the gradient of expand): leading dimensions and
// dimensions of size 1 in `shape` are summed over.
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

}  // namespace headroom
