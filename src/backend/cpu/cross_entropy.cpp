// Cross-entropy kernels: per row a max, a sum of exponentials and a log (forward), and one pass
// writing softmax - onehot (backward). exp is a polynomial that vectorises (libm's expf does not
// without -ffast-math), accurate to about 2 ulp.
#include "backend/cpu/cross_entropy.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/norm_rows.h"

namespace headroom::cpu {

namespace {

// e^x by Cody-Waite range reduction, x = n ln2 + r with |r| <= ln2 / 2, and Cephes' degree-6
// polynomial for e^r. Inputs below -87.33 give 0 rather than a subnormal: see
// Note [No subnormal probabilities].
HEADROOM_ROW_INLINE inline float exp_approx(float input) {
  float x = input < -87.3365f ? -87.3365f : input;
  x = x > 88.7228f ? 88.7228f : x;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (no -ffast-math: not reassociated).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return input < -87.3365f ? 0.0f : e_r * two_n;
}

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
