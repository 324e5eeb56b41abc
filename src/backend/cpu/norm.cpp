// LayerNorm / RMSNorm kernels: two passes over a row for the statistics (the row stays in cache),
// one to write it. Row bodies are templates on the presence of weight / bias so that the inner
// loops carry no branches.
#include "backend/cpu/norm.h"

#include <cmath>

#include "backend/cpu/norm_rows.h"

namespace headroom::cpu {

namespace {

template <bool kWeight, bool kBias>
HEADROOM_ROW_INLINE inline void affine_row(const float* x, const float* weight, const float* bias,
                                           float shift, float rstd, int64_t dim, float* y) {
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) {
    float v = (x[j] - shift) * rstd;
    if constexpr (kWeight) v *= weight[j];
    if constexpr (kBias) v += bias[j];
    y[j] = v;
  }
}

// Sums over the row of g = dy * weight and of g * x-hat, x-hat = (x - shift) * rstd.
template <bool kWeight>
HEADROOM_ROW_INLINE inline void backward_sums(const float* dy, const float* x, const float* weight,
                                              float shift, float rstd, int64_t dim, float& sum_g,
                                              float& sum_gx) {
  float a = 0.0f, c = 0.0f;
#pragma omp simd reduction(+ : a, c)
  for (int64_t j = 0; j < dim; ++j) {
    const float g = kWeight ? dy[j] * weight[j] : dy[j];
    a += g;
    c += g * ((x[j] - shift) * rstd);
  }
  sum_g = a;
  sum_gx = c;
}

// dx = rstd * (g - mean_g - x-hat * mean_gx); with kPartial also the block's running sums of
// dy * x-hat (pw) and dy (pb), in the same pass.
template <bool kWeight, bool kPartial>
HEADROOM_ROW_INLINE inline void backward_dx(const float* dy, const float* x, const float* weight,
                                            float shift, float rstd, float mean_g, float mean_gx,
                                            int64_t dim, float* dx, float* pw, float* pb) {
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) {
    const float g = kWeight ? dy[j] * weight[j] : dy[j];
    const float xhat = (x[j] - shift) * rstd;
    dx[j] = rstd * (g - mean_g - xhat * mean_gx);
    if constexpr (kPartial) {
      pw[j] += dy[j] * xhat;
      pb[j] += dy[j];
    }
  }
}

// One block of rows of the backward: dx, and the block's partial sums of dy * x-hat (and dy).
// layer_norm subtracts the mean (kCentred); rms_norm does not.
template <bool kCentred, bool kWeight>
HEADROOM_ROW_INLINE inline void backward_block(const float* dy, const float* x, const float* weight,
                                               const float* mean, const float* rstd, int64_t begin,
                                               int64_t end, int64_t dim, float* dx,
                                               float* partial) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  float* pw = partial;
  float* pb = partial ? partial + dim : nullptr;
  if (partial) {
#pragma omp simd
    for (int64_t j = 0; j < 2 * dim; ++j) partial[j] = 0.0f;
  }
  for (int64_t r = begin; r < end; ++r) {
    const float* dyr = dy + r * dim;
    const float* xr = x + r * dim;
    const float shift = kCentred ? mean[r] : 0.0f;
    const float rs = rstd[r];
    if (dx) {
      float sum_g, sum_gx;
      backward_sums<kWeight>(dyr, xr, weight, shift, rs, dim, sum_g, sum_gx);
      const float mean_g = kCentred ? sum_g * inv_dim : 0.0f, mean_gx = sum_gx * inv_dim;
      if (partial) {
        backward_dx<kWeight, true>(dyr, xr, weight, shift, rs, mean_g, mean_gx, dim, dx + r * dim,
                                   pw, pb);
      } else {
        backward_dx<kWeight, false>(dyr, xr, weight, shift, rs, mean_g, mean_gx, dim, dx + r * dim,
                                    pw, pb);
      }
    } else if (partial) {
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) {
        pw[j] += dyr[j] * ((xr[j] - shift) * rs);
        pb[j] += dyr[j];
      }
    }
  }
}

// dweight[j] (and dbias[j]) = the sum over blocks of the partial sums, block 0 first.
void reduce_partials(const float* partial, int64_t blocks, int64_t dim, float* dweight,
                     float* dbias) {
#pragma omp parallel for schedule(static) if (blocks * dim > (1 << 16))
  for (int64_t j = 0; j < dim; ++j) {
    float w = 0.0f, b = 0.0f;
    for (int64_t k = 0; k < blocks; ++k) {
      w += partial[k * 2 * dim + j];
      b += partial[k * 2 * dim + dim + j];
    }
    if (dweight) dweight[j] = w;
    if (dbias) dbias[j] = b;
  }
}

template <bool kCentred>
void norm_backward(const float* dy, const float* x, const float* weight, const float* mean,
                   const float* rstd, int64_t rows, int64_t dim, float* dx, float* dweight,
                   float* dbias, float* partial) {
  if (!dweight && !dbias) partial = nullptr;
  const int64_t blocks = norm_backward_blocks(rows);
  for_each_row(blocks, rows * dim, [&](int64_t b) HEADROOM_ROW_INLINE {
    const int64_t begin = b * rows / blocks, end = (b + 1) * rows / blocks;
    float* block_partial = partial ? partial + b * 2 * dim : nullptr;
    if (weight) {
      backward_block<kCentred, true>(dy, x, weight, mean, rstd, begin, end, dim, dx, block_partial);
    } else {
      backward_block<kCentred, false>(dy, x, weight, mean, rstd, begin, end, dim, dx,
                                      block_partial);
    }
  });
  if (partial) reduce_partials(partial, blocks, dim, dweight, dbias);
}

}  // namespace

int64_t norm_backward_blocks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(rows, 32));
}

void layer_norm_forward(const float* x, const float* weight, const float* bias, int64_t rows,
                        int64_t dim, float eps, float* y, float* mean, float* rstd) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for_each_row(rows, rows * dim, [&](int64_t r) HEADROOM_ROW_INLINE {
    const float* xr = x + r * dim;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < dim; ++j) s += xr[j];
    const float m = s * inv_dim;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t j = 0; j < dim; ++j) {
      const float d = xr[j] - m;
      v += d * d;
    }
    const float rs = 1.0f / std::sqrt(v * inv_dim + eps);
    mean[r] = m;
    rstd[r] = rs;
    float* yr = y + r * dim;
    if (weight && bias) {
      affine_row<true, true>(xr, weight, bias, m, rs, dim, yr);
    } else if (weight) {
      affine_row<true, false>(xr, weight, bias, m, rs, dim, yr);
    } else if (bias) {
      affine_row<false, true>(xr, weight, bias, m, rs, dim, yr);
    } else {
      affine_row<false, false>(xr, weight, bias, m, rs, dim, yr);
    }
  });
}

void layer_norm_backward(const float* dy, const float* x, const float* weight, const float* mean,
                         const float* rstd, int64_t rows, int64_t dim, float* dx, float* dweight,
                         float* dbias, float* partial) {
  norm_backward<true>(dy, x, weight, mean, rstd, rows, dim, dx, dweight, dbias, partial);
}

void rms_norm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                      float* y, float* rstd) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for_each_row(rows, rows * dim, [&](int64_t r) HEADROOM_ROW_INLINE {
    const float* xr = x + r * dim;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < dim; ++j) s += xr[j] * xr[j];
    const float rs = 1.0f / std::sqrt(s * inv_dim + eps);
    rstd[r] = rs;
    if (weight) {
      affine_row<true, false>(xr, weight, nullptr, 0.0f, rs, dim, y + r * dim);
    } else {
      affine_row<false, false>(xr, weight, nullptr, 0.0f, rs, dim, y + r * dim);
    }
  });
}

void rms_norm_backward(const float* dy, const float* x, const float* weight, const float* rstd,
                       int64_t rows, int64_t dim, float* dx, float* dweight, float* partial) {
  norm_backward<false>(dy, x, weight, nullptr, rstd, rows, dim, dx, dweight, nullptr, partial);
}

}  // namespace headroom::cpu
