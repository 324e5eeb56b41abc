// Softmax with backward (saves its output only).
#pragma once

#include "core/tensor.h"

namespace headroom {

Tensor softmax(const Tensor& x, int64_t dim = -1);

}  // namespace headroom
