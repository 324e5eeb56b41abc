// fp32 CPU dropout kernel; see Note [Dropout mask] in ops/dropout.cpp.
#pragma once

#include <cstdint>

namespace headroom::cpu {

// out[i] = keep(i) ? x[i] * scale : 0, where keep(i) holds when the 24-bit uniform word of
// element i of the Philox draw (seed, offset) is >= threshold. Forward applies it to x, backward
// to the gradient, with the same arguments.
void dropout_apply(const float* x, float* out, int64_t n, uint64_t seed, uint64_t offset,
                   uint32_t threshold, float scale);

}  // namespace headroom::cpu
