// The loops behind gradient clipping on contiguous CPU arrays of f32, bf16 or f16: a p-norm
// accumulated in double, and in-place scaling and clamping computed in fp32 and rounded back to
// the array's dtype. optim/clip_grad.cpp drives them.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace headroom::cpu {

// The p-norm of n elements of `dtype` (f32, bf16 or f16), from their exact fp32 values: the sum
// of |x|^p accumulated in double, then its p-th root (sqrt for p = 2, nothing for p = 1); for
// p = inf the largest |x|. A NaN element makes the norm NaN. 0 for n = 0. p > 0.
// Deterministic for a fixed number of OpenMP threads.
double vector_norm(const void* x, DType dtype, int64_t n, double p);

// x[i] = x[i] * factor in fp32, rounded to nearest-even into the array's dtype.
void scale_in_place(void* x, DType dtype, int64_t n, float factor);

// x[i] = min(max(x[i], low), high) in fp32, rounded into the array's dtype; NaN stays NaN.
void clamp_in_place(void* x, DType dtype, int64_t n, float low, float high);

}  // namespace headroom::cpu
