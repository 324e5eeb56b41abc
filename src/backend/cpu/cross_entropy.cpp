// Cross-entropy kernels: per row a max, a sum of exponentials and a log (forward), and one pass
// writing softmax - onehot (backward). exp is backend/exp_approx.h's polynomial, which
// vectorises and which the CUDA kernels share.
#include "backend/cpu/cross_entropy.h"

#include <cmath>
#include <limits>

#include "backend/cpu/norm_rows.h"
#include "backend/exp_approx.h"

namespace headroom::cpu {

namespace {

// Note [No subnormal probabilities]
// Logits of a trained LM head spread widely, so many probabilities fall below FLT_MIN, and
// arithmetic on subnormals is some 100x slower on x86 (the GEMMs that consume the gradient of
// linear_cross_entropy ran 30x slower). exp_approx and the gradient flush them to zero; nothing
// that small changes a sum of probabilities or a gradient step.
HEADROOM_ROW_INLINE inline float flush_subnormal(float v) {
  return std::abs(v) < std::numeric_limits<float>::min() ? 0.0f : v;
}

template <typename Index>
double forward_rows(const float* logits, const Index* targets, int64_t rows, int64_t vocab,
                    int64_t ignore_index, float* lse) {
  for_each_row(rows, rows * vocab * 4, [&](int64_t r) HEADROOM_ROW_INLINE {
    const float* x = logits + r * vocab;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < vocab; ++j) m = x[j] > m ? x[j] : m;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < vocab; ++j) s += exp_approx(x[j] - m);
    lse[r] = m + std::log(s);
  });
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = targets[r];
    if (t != ignore_index) total += static_cast<double>(lse[r]) - logits[r * vocab + t];
  }
  return total;
}

template <typename Index>
void backward_rows(const float* logits, const float* lse, const Index* targets, int64_t rows,
                   int64_t vocab, int64_t ignore_index, float scale, float* dlogits) {
  for_each_row(rows, rows * vocab * 4, [&](int64_t r) HEADROOM_ROW_INLINE {
    const float* x = logits + r * vocab;
    float* d = dlogits + r * vocab;
    const int64_t t = targets[r];
    if (t == ignore_index) {
#pragma omp simd
      for (int64_t j = 0; j < vocab; ++j) d[j] = 0.0f;
      return;
    }
    const float shift = lse[r];
#pragma omp simd
    for (int64_t j = 0; j < vocab; ++j) d[j] = flush_subnormal(exp_approx(x[j] - shift) * scale);
    d[t] -= scale;
  });
}

}  // namespace

double cross_entropy_forward(const float* logits, const int64_t* targets, int64_t rows,
                             int64_t vocab, int64_t ignore_index, float* lse) {
  return forward_rows(logits, targets, rows, vocab, ignore_index, lse);
}

double cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows,
                             int64_t vocab, int64_t ignore_index, float* lse) {
  return forward_rows(logits, targets, rows, vocab, ignore_index, lse);
}

void cross_entropy_backward(const float* logits, const float* lse, const int64_t* targets,
                            int64_t rows, int64_t vocab, int64_t ignore_index, float scale,
                            float* dlogits) {
  backward_rows(logits, lse, targets, rows, vocab, ignore_index, scale, dlogits);
}

void cross_entropy_backward(const float* logits, const float* lse, const int32_t* targets,
                            int64_t rows, int64_t vocab, int64_t ignore_index, float scale,
                            float* dlogits) {
  backward_rows(logits, lse, targets, rows, vocab, ignore_index, scale, dlogits);
}

}  // namespace headroom::cpu
