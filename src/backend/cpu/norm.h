// LayerNorm and RMSNorm over the last dimension of fp32 rows: forward keeps the per-row
// statistics that backward needs; backward reduces weight / bias gradients over rows in a fixed
// order (per-block partial sums, then a sum over blocks), so results repeat bit for bit.
#pragma once

#include <cstdint>

namespace headroom::cpu {

// Row blocks whose partial weight / bias gradients the backward kernels reduce; a function of
// the row count only, never of the thread count. The workspace holds [blocks, 2, dim] floats.
int64_t norm_backward_blocks(int64_t rows);

// y = (x - mean) * rstd * weight + bias per row of `dim` floats (weight / bias may be null);
// writes mean and rstd = 1 / sqrt(biased variance + eps) per row.
void layer_norm_forward(const float* x, const float* weight, const float* bias, int64_t rows,
                        int64_t dim, float eps, float* y, float* mean, float* rstd);
// dx (may be null), and dweight / dbias (each may be null; `partial` is the workspace when either
// is wanted). weight may be null (no affine).
void layer_norm_backward(const float* dy, const float* x, const float* weight, const float* mean,
                         const float* rstd, int64_t rows, int64_t dim, float* dx, float* dweight,
                         float* dbias, float* partial);

// y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) per row (weight may be null).
void rms_norm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                      float* y, float* rstd);
void rms_norm_backward(const float* dy, const float* x, const float* weight, const float* rstd,
                       int64_t rows, int64_t dim, float* dx, float* dweight, float* partial);

}  // namespace headroom::cpu
