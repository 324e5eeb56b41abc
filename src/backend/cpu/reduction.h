// An fp32 column sum on raw arrays, for the ops of other families that still sum their own fp32
// buffers (ops/linear.cpp's bias gradient); the reductions themselves go through the kernel
// table (backend/reduction_kernels.h, filled by backend/cpu/reduction.cpp).
#pragma once

#include <cstdint>

namespace headroom::cpu {

// x viewed as [outer, n, inner]; out[o, i] = sum_j x[o, j, i], accumulated in double.
void sum_middle(const float* x, int64_t outer, int64_t n, int64_t inner, float* out);

}  // namespace headroom::cpu
