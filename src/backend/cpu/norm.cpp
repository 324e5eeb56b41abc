// The CPU's norm kernels (backend/norm_kernels.h): LayerNorm / RMSNorm over the last dimension
// on tensors in their own dtypes, each row widened to fp32 as it is read and rounded once as it
// is written (backend/cpu/widen_rows.h). Two passes over a row for the statistics (the row stays
// in cache), one to write it. Row bodies are templates on the presence of weight / bias so that
// the inner loops carry no branches. Backward reduces weight / bias gradients over rows in a
// fixed order (per-block partial sums, then a sum over blocks), so results repeat bit for bit.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/norm_rows.h"
#include "backend/cpu/widen_rows.h"
#include "backend/norm_kernels.h"

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

// dx = rstd * (g - mean_g - x-hat * mean_gx), plus the residual's gradient res with kResidual
// (res may be dx itself: each element is read before it is written); with kPartial also the
// block's running sums of dy * x-hat (pw) and dy (pb), in the same pass.
template <bool kWeight, bool kPartial, bool kResidual>
HEADROOM_ROW_INLINE inline void backward_dx(const float* dy, const float* x, const float* weight,
                                            float shift, float rstd, float mean_g, float mean_gx,
                                            int64_t dim, const float* res, float* dx, float* pw,
                                            float* pb) {
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) {
    const float g = kWeight ? dy[j] * weight[j] : dy[j];
    const float xhat = (x[j] - shift) * rstd;
    const float d = rstd * (g - mean_g - xhat * mean_gx);
    if constexpr (kResidual) {
      dx[j] = res[j] + d;
    } else {
      dx[j] = d;
    }
    if constexpr (kPartial) {
      pw[j] += dy[j] * xhat;
      pb[j] += dy[j];
    }
  }
}

// One block of rows of the backward: dx, and the block's partial sums of dy * x-hat (and dy).
// layer_norm subtracts the mean (kCentred); rms_norm does not.
template <bool kCentred, bool kWeight>
HEADROOM_ROW_INLINE inline void backward_block(const WidenRows& dy, const WidenRows& x,
                                               const float* weight, const float* mean,
                                               const float* rstd, int64_t begin, int64_t end,
                                               int64_t dim, const WidenRows& res,
                                               const WidenRows& dx, float* partial) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  float* pw = partial;
  float* pb = partial ? partial + dim : nullptr;
  if (partial) {
#pragma omp simd
    for (int64_t j = 0; j < 2 * dim; ++j) partial[j] = 0.0f;
  }
  float* scratch = thread_scratch(4 * dim);
  for (int64_t r = begin; r < end; ++r) {
    const float* dyr = dy.read(r, scratch);
    const float* xr = x.read(r, scratch + dim);
    const float shift = kCentred ? mean[r] : 0.0f;
    const float rs = rstd[r];
    if (dx.defined()) {
      // Read before dx's row is targeted: res may be dx, whose bf16 row then widens into
      // its own buffer first.
      const float* resr = res.read(r, scratch + 3 * dim);
      float* dxr = dx.target(r, scratch + 2 * dim);
      float sum_g, sum_gx;
      backward_sums<kWeight>(dyr, xr, weight, shift, rs, dim, sum_g, sum_gx);
      const float mean_g = kCentred ? sum_g * inv_dim : 0.0f, mean_gx = sum_gx * inv_dim;
      const auto row = [&]<bool kPartial, bool kResidual>() HEADROOM_ROW_INLINE {
        backward_dx<kWeight, kPartial, kResidual>(dyr, xr, weight, shift, rs, mean_g, mean_gx, dim,
                                                  resr, dxr, pw, pb);
      };
      if (partial && resr) {
        row.template operator()<true, true>();
      } else if (partial) {
        row.template operator()<true, false>();
      } else if (resr) {
        row.template operator()<false, true>();
      } else {
        row.template operator()<false, false>();
      }
      dx.store(r, dxr);
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

// The rows and row length of a norm's x (contiguous, last dimension > 0).
int64_t row_count(const Tensor& x) { return x.numel() / x.size(-1); }

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// The weight in fp32 with `offset` added to each element (Gemma's 1 + w, as transformers computes
// 1.0 + weight.float()); null when undefined.
const float* widened_weight(const Tensor& weight, float offset, std::vector<float>& storage) {
  const float* w = widened(weight, storage);
  if (w == nullptr || offset == 0.0f) return w;
  if (storage.empty()) storage.assign(w, w + weight.numel());
  for (float& v : storage) v += offset;
  return storage.data();
}

template <bool kCentred>
void norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                   float weight_offset, const Tensor& mean, const Tensor& rstd,
                   const Tensor& grad_residual, const Tensor& dx, const Tensor& dweight,
                   const Tensor& dbias, const Tensor& partial) {
  ensure_flush_denormal();
  const int64_t dim = x.size(-1), rows = row_count(x);
  std::vector<float> weight_f32;
  const float* w = widened_weight(weight, weight_offset, weight_f32);
  const WidenRows dys(grad_out, dim), xs(x, dim), res(grad_residual, dim), dxs(dx, dim);
  const float* mp = kCentred ? mean.data<float>() : nullptr;
  const float* rp = rstd.data<float>();
  float* pp = dweight.defined() || dbias.defined() ? partial.data<float>() : nullptr;
  const int64_t blocks = norm_backward_blocks(rows);
  for_each_row(blocks, rows * dim, [&](int64_t b) HEADROOM_ROW_INLINE {
    const int64_t begin = b * rows / blocks, end = (b + 1) * rows / blocks;
    float* block_partial = pp ? pp + b * 2 * dim : nullptr;
    if (w) {
      backward_block<kCentred, true>(dys, xs, w, mp, rp, begin, end, dim, res, dxs, block_partial);
    } else {
      backward_block<kCentred, false>(dys, xs, w, mp, rp, begin, end, dim, res, dxs, block_partial);
    }
  });
  if (pp) reduce_partials(pp, blocks, dim, data_or_null(dweight), data_or_null(dbias));
}

// The rows of a norm's input: x itself, or with a residual add (add_*_norm_forward) the sum
// residual + branch, computed in fp32, rounded into sum's row and read back as rounded, which
// is what add's result would hold and the norm then read.
class NormInputRows {
 public:
  NormInputRows(const Tensor& x, int64_t dim) : x_(x, dim), dim_(dim) {}
  NormInputRows(const Tensor& residual, const Tensor& branch, const Tensor& sum, int64_t dim)
      : x_(sum, dim), residual_(residual, dim), branch_(branch, dim), dim_(dim) {}

  // Row r in fp32, using scratch[0, 3 * dim).
  HEADROOM_ROW_INLINE const float* read(int64_t r, float* scratch) const {
    if (!residual_.defined()) return x_.read(r, scratch);
    const float* a = residual_.read(r, scratch + dim_);
    const float* b = branch_.read(r, scratch + 2 * dim_);
    float* s = x_.target(r, scratch);
#pragma omp simd
    for (int64_t j = 0; j < dim_; ++j) s[j] = a[j] + b[j];
    x_.store(r, s);
    return x_.read(r, scratch);
  }

 private:
  WidenRows x_, residual_, branch_;
  int64_t dim_;
};

void layer_norm_rows(const NormInputRows& xs, int64_t rows, int64_t dim, const Tensor& weight,
                     const Tensor& bias, float eps, const Tensor& out, const Tensor& mean,
                     const Tensor& rstd) {
  ensure_flush_denormal();
  std::vector<float> weight_f32, bias_f32;
  const float* w = widened(weight, weight_f32);
  const float* bias_data = widened(bias, bias_f32);
  const WidenRows ys(out, dim);
  float* mp = mean.data<float>();
  float* rp = rstd.data<float>();
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for_each_row(rows, rows * dim, [&](int64_t r) HEADROOM_ROW_INLINE {
    float* scratch = thread_scratch(4 * dim);
    const float* xr = xs.read(r, scratch);
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
    mp[r] = m;
    rp[r] = rs;
    float* yr = ys.target(r, scratch + 3 * dim);
    if (w && bias_data) {
      affine_row<true, true>(xr, w, bias_data, m, rs, dim, yr);
    } else if (w) {
      affine_row<true, false>(xr, w, bias_data, m, rs, dim, yr);
    } else if (bias_data) {
      affine_row<false, true>(xr, w, bias_data, m, rs, dim, yr);
    } else {
      affine_row<false, false>(xr, w, bias_data, m, rs, dim, yr);
    }
    ys.store(r, yr);
  });
}

void rms_norm_rows(const NormInputRows& xs, int64_t rows, int64_t dim, const Tensor& weight,
                   float eps, float weight_offset, const Tensor& out, const Tensor& rstd) {
  ensure_flush_denormal();
  std::vector<float> weight_f32;
  const float* w = widened_weight(weight, weight_offset, weight_f32);
  const WidenRows ys(out, dim);
  float* rp = rstd.data<float>();
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for_each_row(rows, rows * dim, [&](int64_t r) HEADROOM_ROW_INLINE {
    float* scratch = thread_scratch(4 * dim);
    const float* xr = xs.read(r, scratch);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < dim; ++j) s += xr[j] * xr[j];
    const float rs = 1.0f / std::sqrt(s * inv_dim + eps);
    rp[r] = rs;
    float* yr = ys.target(r, scratch + 3 * dim);
    if (w) {
      affine_row<true, false>(xr, w, nullptr, 0.0f, rs, dim, yr);
    } else {
      affine_row<false, false>(xr, w, nullptr, 0.0f, rs, dim, yr);
    }
    ys.store(r, yr);
  });
}

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                        const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t dim = x.size(-1);
  layer_norm_rows(NormInputRows(x, dim), row_count(x), dim, weight, bias, eps, out, mean, rstd);
}

void add_layer_norm_forward(const Tensor& residual, const Tensor& branch, const Tensor& weight,
                            const Tensor& bias, float eps, const Tensor& sum, const Tensor& out,
                            const Tensor& mean, const Tensor& rstd) {
  const int64_t dim = sum.size(-1);
  layer_norm_rows(NormInputRows(residual, branch, sum, dim), row_count(sum), dim, weight, bias, eps,
                  out, mean, rstd);
}

void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& grad_residual,
                         const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         const Tensor& partial) {
  norm_backward<true>(grad_out, x, weight, 0.0f, mean, rstd, grad_residual, dx, dweight, dbias,
                      partial);
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
                      const Tensor& out, const Tensor& rstd) {
  const int64_t dim = x.size(-1);
  rms_norm_rows(NormInputRows(x, dim), row_count(x), dim, weight, eps, weight_offset, out, rstd);
}

void add_rms_norm_forward(const Tensor& residual, const Tensor& branch, const Tensor& weight,
                          float eps, float weight_offset, const Tensor& sum, const Tensor& out,
                          const Tensor& rstd) {
  const int64_t dim = sum.size(-1);
  rms_norm_rows(NormInputRows(residual, branch, sum, dim), row_count(sum), dim, weight, eps,
                weight_offset, out, rstd);
}

void rms_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                       float weight_offset, const Tensor& rstd, const Tensor& grad_residual,
                       const Tensor& dx, const Tensor& dweight, const Tensor& partial) {
  norm_backward<false>(grad_out, x, weight, weight_offset, Tensor(), rstd, grad_residual, dx,
                       dweight, Tensor(), partial);
}

}  // namespace

void fill_norm_kernels(NormKernels& kernels) {
  kernels.layer_norm_forward = layer_norm_forward;
  kernels.layer_norm_backward = layer_norm_backward;
  kernels.rms_norm_forward = rms_norm_forward;
  kernels.rms_norm_backward = rms_norm_backward;
  kernels.add_layer_norm_forward = add_layer_norm_forward;
  kernels.add_rms_norm_forward = add_rms_norm_forward;
}

}  // namespace headroom::cpu
