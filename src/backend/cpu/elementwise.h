// Element-wise fp32 kernels on contiguous arrays (OpenMP over large arrays, vectorised loops).
#pragma once

#include <cstdint>

namespace headroom::cpu {

void add(const float* a, const float* b, float* out, int64_t n);
void sub(const float* a, const float* b, float* out, int64_t n);
void mul(const float* a, const float* b, float* out, int64_t n);
// out = a * alpha
void scale(const float* a, float alpha, float* out, int64_t n);
// out = a * alpha + b * beta
void axpby(const float* a, float alpha, const float* b, float beta, float* out, int64_t n);

}  // namespace headroom::cpu
