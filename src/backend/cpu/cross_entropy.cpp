// The CPU's cross-entropy kernels (backend/cross_entropy_kernels.h): per row a max, a sum of
// exponentials and a log (forward), and one pass writing softmax - onehot (backward), on logits in
// their own dtype. f32 rows are read in place; bf16 / f16 rows are widened one at a time into the
// thread's scratch and gradients rounded once as they are stored, as the CUDA kernels load and
// store them. exp is backend/exp_approx.h's polynomial, which vectorises and which CUDA shares.
#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/norm_rows.h"
#include "backend/cpu/widen_rows.h"
#include "backend/cross_entropy_kernels.h"
#include "backend/exp_approx.h"
#include "core/element_io.h"
#include "core/error.h"

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

// Rows of a [rows, vocab] tensor with a unit column stride and any row stride (checked by the
// entry), seen as fp32: f32 rows in place, others widened into a buffer and rounded back once by
// store().
class StridedRows {
 public:
  explicit StridedRows(const Tensor& t)
      : base_(static_cast<char*>(t.data_ptr())),
        dtype_(t.dtype()),
        row_bytes_(t.stride(0) * static_cast<int64_t>(t.element_size())),
        vocab_(t.size(1)) {}

  const float* read(int64_t r, float* buf) const {
    if (dtype_ == DType::f32) return reinterpret_cast<const float*>(base_ + r * row_bytes_);
    convert_to_f32(base_ + r * row_bytes_, dtype_, buf, static_cast<size_t>(vocab_));
    return buf;
  }
  float* target(int64_t r, float* buf) const {
    return dtype_ == DType::f32 ? reinterpret_cast<float*>(base_ + r * row_bytes_) : buf;
  }
  void store(int64_t r, const float* computed) const {
    if (dtype_ != DType::f32) {
      convert_from_f32(computed, base_ + r * row_bytes_, dtype_, static_cast<size_t>(vocab_));
    }
  }

 private:
  char* base_;
  DType dtype_;
  int64_t row_bytes_;
  int64_t vocab_;
};

// Calls fn with the targets' data (i32 or i64, checked by the entry) as a typed pointer.
template <typename Fn>
auto with_targets(const Tensor& targets, Fn&& fn) {
  if (targets.dtype() == DType::i64) return fn(static_cast<const int64_t*>(targets.data_ptr()));
  return fn(static_cast<const int32_t*>(targets.data_ptr()));
}

int64_t count_targets(const Tensor& targets, int64_t vocab, int64_t ignore_index,
                      int64_t* first_bad) {
  if ((targets.dtype() != DType::i64 && targets.dtype() != DType::i32) ||
      !targets.is_contiguous()) {
    throw ValueError(str_cat("count_targets: targets must be contiguous i32 or i64, not ",
                             dtype_name(targets.dtype()), " ", targets.shape()));
  }
  return with_targets(targets, [&](const auto* t) {
    int64_t count = 0, bad = -1;
    for (int64_t i = 0; i < targets.numel(); ++i) {
      const int64_t v = t[i];
      if (v == ignore_index) continue;
      if (v >= 0 && v < vocab) {
        ++count;
      } else if (bad < 0) {
        bad = i;
      }
    }
    if (first_bad) *first_bad = bad;
    return count;
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                           const Tensor& lse, const Tensor& row_loss) {
  const LogitRows shape =
      check_cross_entropy_forward("cross_entropy", logits, targets, lse, row_loss);
  const int64_t rows = shape.rows, vocab = shape.vocab;
  const StridedRows xs(logits);
  float* lp = lse.data<float>();
  float* loss = row_loss.data<float>();
  with_targets(targets, [&](const auto* t) {
    for_each_row(rows, rows * vocab, [&](int64_t r) HEADROOM_ROW_INLINE {
      const float* x = xs.read(r, thread_scratch(vocab));
      float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
      for (int64_t j = 0; j < vocab; ++j) m = x[j] > m ? x[j] : m;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < vocab; ++j) s += exp_approx(x[j] - m);
      const float row_lse = m + std::log(s);
      lp[r] = row_lse;
      const int64_t target = t[r];
      // The op has checked the targets; an unchecked bad one gives NaN rather than a wild read.
      loss[r] = target == ignore_index          ? 0.0f
                : target >= 0 && target < vocab ? row_lse - x[target]
                                                : std::numeric_limits<float>::quiet_NaN();
    });
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            int64_t ignore_index, float scale, float softcap,
                            const Tensor& grad_scale, const Tensor& grad_logits) {
  const LogitRows shape = check_cross_entropy_backward("cross_entropy backward", logits, lse,
                                                       targets, grad_scale, grad_logits);
  const int64_t rows = shape.rows, vocab = shape.vocab;
  if (rows == 0) return;
  const StridedRows xs(logits), ds(grad_logits);
  const float s =
      grad_scale.defined() ? scale * load_as_f32(grad_scale.data_ptr(), grad_scale.dtype()) : scale;
  const float* lp = lse.data<float>();
  with_targets(targets, [&](const auto* t) {
    for_each_row(rows, rows * vocab, [&](int64_t r) HEADROOM_ROW_INLINE {
      // Two rows of scratch: in place on a bf16 / f16 buffer, the row is read before it is written.
      float* scratch = thread_scratch(2 * vocab);
      const float* x = xs.read(r, scratch);
      float* d = ds.target(r, scratch + vocab);
      const int64_t target = t[r];
      if (target == ignore_index) {
#pragma omp simd
        for (int64_t j = 0; j < vocab; ++j) d[j] = 0.0f;
      } else if (softcap > 0.0f) {
        // Each gradient times the cap's slope at its logit, read before it is overwritten (in
        // place, x is d): the target's own element is recomputed from its logit, kept apart.
        const float shift = lp[r];
        const bool hit = target >= 0 && target < vocab;
        const float target_logit = hit ? x[target] : 0.0f;
#pragma omp simd
        for (int64_t j = 0; j < vocab; ++j) {
          const float v = x[j], t = v / softcap;
          d[j] = flush_subnormal(exp_approx(v - shift) * s) * (1.0f - t * t);
        }
        if (hit) {
          const float t = target_logit / softcap;
          d[target] = (flush_subnormal(exp_approx(target_logit - shift) * s) - s) * (1.0f - t * t);
        }
      } else {
        const float shift = lp[r];
#pragma omp simd
        for (int64_t j = 0; j < vocab; ++j) d[j] = flush_subnormal(exp_approx(x[j] - shift) * s);
        if (target >= 0 && target < vocab) d[target] -= s;
      }
      ds.store(r, d);
    });
  });
}

void mean_loss(const Tensor& row_loss, int64_t count, const Tensor& out) {
  check_mean_loss(row_loss, out);
  const float* loss = row_loss.data<float>();
  double total = 0.0;  // in row order: the loss repeats bit for bit
  for (int64_t r = 0; r < row_loss.numel(); ++r) total += loss[r];
  out.data<float>()[0] = count == 0 ? std::numeric_limits<float>::quiet_NaN()
                                    : static_cast<float>(total / static_cast<double>(count));
}

void scale_by_scalar(const Tensor& x, const Tensor& scalar, const Tensor& out) {
  check_scale_by_scalar(x, scalar, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  const float factor = load_as_f32(scalar.data_ptr(), scalar.dtype());
  // The common factor 1 (no loss scale, no accumulation) costs nothing here: the CPU reads the
  // scalar for free, where a GPU would have to sync to.
  if (factor == 1.0f) {
    if (out.data_ptr() != x.data_ptr()) {
      std::memcpy(out.data_ptr(), x.data_ptr(), static_cast<size_t>(n) * x.element_size());
    }
    return;
  }
  constexpr int64_t kSpan = 4096;
  const int64_t spans = (n + kSpan - 1) / kSpan;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < spans; ++i) {
    const int64_t begin = i * kSpan, len = std::min(kSpan, n - begin);
    float* scratch = thread_scratch(2 * kSpan);
    const float* in = widen_span(x, begin, len, scratch);
    float* result = span_target(out, begin, scratch + kSpan);
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) result[j] = in[j] * factor;
    store_span(out, begin, len, result);
  }
}

}  // namespace

void fill_cross_entropy_kernels(CrossEntropyKernels& kernels) {
  kernels.count_targets = count_targets;
  kernels.forward = cross_entropy_forward;
  kernels.backward = cross_entropy_backward;
  kernels.mean_loss = mean_loss;
  kernels.scale_by_scalar = scale_by_scalar;
}

}  // namespace headroom::cpu
