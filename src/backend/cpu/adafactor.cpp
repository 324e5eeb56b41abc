// Adafactor's CPU kernel, the adafactor table's entry (backend/adafactor_kernels.h): HF's step
// (Note [Adafactor step]) with the factored statistics reduced in place, so that a step needs no
// temporary of the parameter's size, only col_factor of the column statistics' size. Parameters
// f32 / bf16 / f16 are read a row or span at a time, updated in fp32 and rounded once; gradients
// are widened the same way; the sums run in order on one thread, so results repeat bit for bit.
#include <algorithm>
#include <cmath>

#include "backend/adafactor_kernels.h"
#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/widen_rows.h"

namespace headroom::cpu {

namespace {

// Note [Adafactor step]
// transformers.optimization.Adafactor.step() for one parameter, in fp32 as torch computes it:
//   RMS = ||p|| / sqrt(n);  lr_t = max(eps2, RMS) * rho  (or rho) where rho is lr, or
//   min(1e-2 or 1e-6 t, 1/sqrt(t)) with relative_step;  beta2t = 1 - t^decay_rate;  U = g*g + eps1
//   matrices [.., R, C]: row = beta2t row + (1-beta2t) mean_C(U), col = likewise mean_R(U),
//                        u = (rsqrt(row / mean_R(row)) * rsqrt(col)) * g
//   vectors:             v = beta2t v + (1-beta2t) U,  u = rsqrt(v) * g
//   u = (u / max(1, RMS(u) / clip_threshold)) * lr_t;  with beta1: m = b1 m + (1-b1) u, u = m
//   p = p - wd*lr_t*p (if wd != 0);  p = p - u
// The running averages and the decay are torch's add_ with alpha, which its AVX2 kernels fuse
// (fma). The update u is never stored: it is computed once to get its RMS and again to apply it,
// the same float operations both times; matrices need only rsqrt(col), of the column
// statistics' size.

// The step's fp32 scalars once lr_t is known.
struct Step {
  float beta2t, one_minus_beta2t;
  float eps1;
  float clip_threshold;
  float lr;
  float neg_decay;  // -weight_decay * lr_t
  bool decay;
  bool first_moment;
  float beta1, one_minus_beta1;
};

constexpr int64_t kSpan = 512;

float rms_of(double sum_of_squares, int64_t n) {
  return static_cast<float>(std::sqrt(sum_of_squares)) /
         static_cast<float>(std::sqrt(static_cast<double>(n)));
}

// The parameter's sum of squares in double, in order, from its fp32 values.
double param_sum_of_squares(const Tensor& param) {
  alignas(64) float buf[kSpan];
  const int64_t n = param.numel();
  double sum = 0.0;
  for (int64_t offset = 0; offset < n; offset += kSpan) {
    const int64_t count = std::min(kSpan, n - offset);
    const float* x = widen_span(param, offset, count, buf);
    for (int64_t i = 0; i < count; ++i) sum += static_cast<double>(x[i]) * x[i];
  }
  return sum;
}

float mean_of(const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  return sum / static_cast<float>(n);
}

// The last step of Note [Adafactor step] for one element, given u before clipping.
inline void apply_update(float* param, float* exp_avg, float u, float divisor, const Step& c) {
  u = (u / divisor) * c.lr;
  if (c.first_moment) {
    u = std::fma(u, c.one_minus_beta1, *exp_avg * c.beta1);
    *exp_avg = u;
  }
  float p = *param;
  if (c.decay) p = std::fma(p, c.neg_decay, p);
  *param = p - u;
}

float clip_divisor(double update_sum_of_squares, int64_t n, const Step& c) {
  return std::max(1.0f, rms_of(update_sum_of_squares, n) / c.clip_threshold);
}

// A stack of `batch` [rows, cols] matrices; row [batch, rows], col and col_factor [batch, cols];
// one row of the gradient (and of the parameter) widened at a time.
float adafactor_factored(const Tensor& param, const Tensor& grad, float* exp_avg, float* row,
                         float* col, float* col_factor, int64_t batch, int64_t rows, int64_t cols,
                         const Step& c) {
  float* grad_buf = thread_scratch(3 * cols);
  float* param_buf = grad_buf + cols;
  float* update_buf = grad_buf + 2 * cols;
  for (int64_t b = 0; b < batch; ++b) {
    float* row_b = row + b * rows;
    float* col_b = col + b * cols;
    float* col_sum = col_factor + b * cols;
    std::fill(col_sum, col_sum + cols, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = widen_span(grad, (b * rows + r) * cols, cols, grad_buf);
      float row_sum = 0.0f;
      for (int64_t j = 0; j < cols; ++j) {
        const float u = g[j] * g[j] + c.eps1;
        row_sum += u;
        col_sum[j] += u;
      }
      const float row_mean = row_sum / static_cast<float>(cols);
      row_b[r] = std::fma(row_mean, c.one_minus_beta2t, row_b[r] * c.beta2t);
    }
    for (int64_t j = 0; j < cols; ++j) {
      const float col_mean = col_sum[j] / static_cast<float>(rows);
      col_b[j] = std::fma(col_mean, c.one_minus_beta2t, col_b[j] * c.beta2t);
      col_factor[b * cols + j] = 1.0f / std::sqrt(col_b[j]);
    }
  }
  // Two passes over u = (rsqrt(row / mean(row)) * rsqrt(col)) * g: its RMS, then the update.
  // fn(base, u_row): u_row the unclipped update of the row starting at element `base`.
  auto for_each_update_row = [&](auto&& fn) {
    for (int64_t b = 0; b < batch; ++b) {
      const float row_mean = mean_of(row + b * rows, rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float row_factor = 1.0f / std::sqrt(row[b * rows + r] / row_mean);
        const int64_t base = (b * rows + r) * cols;
        const float* g = widen_span(grad, base, cols, grad_buf);
        for (int64_t j = 0; j < cols; ++j) {
          update_buf[j] = (row_factor * col_factor[b * cols + j]) * g[j];
        }
        fn(base, update_buf);
      }
    }
  };
  double update_sum_of_squares = 0.0;
  for_each_update_row([&](int64_t, const float* u) {
    for (int64_t j = 0; j < cols; ++j) update_sum_of_squares += static_cast<double>(u[j]) * u[j];
  });
  const float divisor = clip_divisor(update_sum_of_squares, batch * rows * cols, c);
  for_each_update_row([&](int64_t base, const float* u) {
    widen_span(param, base, cols, param_buf);
    float* p = span_target(param, base, param_buf);
    for (int64_t j = 0; j < cols; ++j) {
      apply_update(p + j, exp_avg != nullptr ? exp_avg + base + j : nullptr, u[j], divisor, c);
    }
    store_span(param, base, cols, p);
  });
  return divisor;
}

// A vector (or a tensor of one dimension's statistics): exp_avg_sq of the parameter's shape.
float adafactor_unfactored(const Tensor& param, const Tensor& grad, float* exp_avg,
                           float* exp_avg_sq, const Step& c) {
  alignas(64) float grad_buf[kSpan];
  alignas(64) float param_buf[kSpan];
  const int64_t n = param.numel();
  double update_sum_of_squares = 0.0;
  for (int64_t offset = 0; offset < n; offset += kSpan) {
    const int64_t count = std::min(kSpan, n - offset);
    const float* g = widen_span(grad, offset, count, grad_buf);
    float* v = exp_avg_sq + offset;
    for (int64_t i = 0; i < count; ++i) {
      const float u = g[i] * g[i] + c.eps1;
      v[i] = std::fma(u, c.one_minus_beta2t, v[i] * c.beta2t);
      const float update = (1.0f / std::sqrt(v[i])) * g[i];
      update_sum_of_squares += static_cast<double>(update) * update;
    }
  }
  const float divisor = clip_divisor(update_sum_of_squares, n, c);
  for (int64_t offset = 0; offset < n; offset += kSpan) {
    const int64_t count = std::min(kSpan, n - offset);
    const float* g = widen_span(grad, offset, count, grad_buf);
    widen_span(param, offset, count, param_buf);
    float* p = span_target(param, offset, param_buf);
    for (int64_t i = 0; i < count; ++i) {
      const float update = (1.0f / std::sqrt(exp_avg_sq[offset + i])) * g[i];
      apply_update(p + i, exp_avg != nullptr ? exp_avg + offset + i : nullptr, update, divisor, c);
    }
    store_span(param, offset, count, p);
  }
  return divisor;
}

void adafactor_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                      const Tensor& exp_avg_sq, const Tensor& row, const Tensor& col,
                      const Tensor& col_factor, int64_t batch, int64_t rows, int64_t cols,
                      const Tensor& scalars, const AdafactorKernels::Coefficients& c) {
  ensure_flush_denormal();
  const int64_t n = param.numel();
  const float rms = rms_of(param_sum_of_squares(param), n);
  // HF's max(eps2, RMS) is the fp32 tensor RMS when that is larger, and lr_t then is fp32.
  double lr = c.rho;
  if (c.scale_parameter) {
    lr = rms > c.eps2 ? static_cast<double>(rms * static_cast<float>(c.rho)) : c.eps2 * c.rho;
  }
  const Step step{.beta2t = c.beta2t,
                  .one_minus_beta2t = c.one_minus_beta2t,
                  .eps1 = c.eps1,
                  .clip_threshold = c.clip_threshold,
                  .lr = static_cast<float>(lr),
                  .neg_decay = static_cast<float>(-c.weight_decay * lr),
                  .decay = c.weight_decay != 0.0,
                  .first_moment = c.first_moment,
                  .beta1 = c.beta1,
                  .one_minus_beta1 = c.one_minus_beta1};
  float* m = exp_avg.defined() ? exp_avg.data<float>() : nullptr;
  const float divisor =
      row.defined() ? adafactor_factored(param, grad, m, row.data<float>(), col.data<float>(),
                                         col_factor.data<float>(), batch, rows, cols, step)
                    : adafactor_unfactored(param, grad, m, exp_avg_sq.data<float>(), step);
  // The slots the optimizer reads back (adafactor_scalars), as the CUDA kernel leaves them.
  auto* s = static_cast<double*>(scalars.data_ptr());
  s[kAdafactorRms] = rms;
  s[kAdafactorRms + 1] = lr;
  s[kAdafactorRms + 2] = divisor;
}

}  // namespace

void fill_adafactor_kernels(AdafactorKernels& kernels) { kernels.update = adafactor_update; }

}  // namespace headroom::cpu
