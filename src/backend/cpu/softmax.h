// fp32 CPU softmax kernels. The input is viewed as [outer, n, inner] and softmax runs over n:
// inner == 1 is the last-dimension case (contiguous rows); otherwise columns are processed in
// tiles of contiguous inner elements, so no transpose is ever materialised.
#pragma once

#include <cstdint>

namespace headroom::cpu {

void softmax_forward(const float* x, float* y, int64_t outer, int64_t n, int64_t inner);
// dx = y * (dy - sum_n(dy * y))
void softmax_backward(const float* y, const float* dy, float* dx, int64_t outer, int64_t n,
                      int64_t inner);

}  // namespace headroom::cpu
