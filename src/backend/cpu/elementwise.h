// An fp32 scaling loop on raw arrays, for the ops of other families that still scale their own
// fp32 buffers in place (ops/cross_entropy.cpp); the element-wise ops themselves go through the
// kernel table (backend/elementwise_kernels.h, filled by backend/cpu/elementwise.cpp).
#pragma once

#include <cstdint>

namespace headroom::cpu {

// out = a * alpha (out may be a).
void scale(const float* a, float alpha, float* out, int64_t n);

}  // namespace headroom::cpu
