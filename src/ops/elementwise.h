// Element-wise arithmetic with broadcasting (as torch), with backward. The residual connection
// of a transformer block is add().
#pragma once

#include "core/tensor.h"

namespace headroom {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
// x * factor
Tensor scale(const Tensor& x, double factor);

}  // namespace headroom
