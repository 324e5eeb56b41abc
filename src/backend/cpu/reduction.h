// The CPU reduction that other CPU kernels reuse: the gemm entry's bias gradient is the
// reduction table's sum_middle, so that a linear's db is the same with or without the epilogue.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace headroom::cpu {

// out[o, i] = factor * sum_j x[o, j, i] for a contiguous x [outer, n, inner] (f32 / bf16 / f16):
// summed in double in order, rounded once to out's dtype.
void sum_middle_tensor(const Tensor& x, int64_t outer, int64_t n, int64_t inner, double factor,
                       const Tensor& out);

}  // namespace headroom::cpu
