// Sums on the CPU, accumulated in double for accuracy (deterministic for a fixed thread count).
#pragma once

#include <cstdint>

namespace headroom::cpu {

double sum_all(const float* x, int64_t n);
// x viewed as [outer, n, inner]; out[o, i] = sum_j x[o, j, i].
void sum_middle(const float* x, int64_t outer, int64_t n, int64_t inner, float* out);

}  // namespace headroom::cpu
