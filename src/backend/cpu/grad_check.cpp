// The gradient checks' CPU kernels (backend/grad_check_kernels.h) that LOMO's clip_grad_norm
// needs: a gradient's partial norms in its own dtype, and their combination into the total norm
// and clip factor, kept in tensors as the CUDA kernels keep them on the device, so that LOMO has
// one path on every device. Each slot of a row folds one contiguous chunk of the tensor in
// order, so results repeat bit for bit whatever the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/widen_rows.h"
#include "backend/grad_check_kernels.h"

namespace headroom::cpu {

namespace {

enum class NormKind { two, one, power, inf };

NormKind norm_kind(double p) {
  if (std::isinf(p)) return NormKind::inf;
  if (p == 2.0) return NormKind::two;
  if (p == 1.0) return NormKind::one;
  return NormKind::power;
}

// |x|^p of one element in double, as cpu::vector_norm computes each term.
double norm_term(float x, NormKind kind, double p) {
  const double v = static_cast<double>(x);
  switch (kind) {
    case NormKind::two: return v * v;
    case NormKind::power: return std::pow(std::fabs(v), p);
    case NormKind::one:
    case NormKind::inf: return std::fabs(v);
  }
  return 0.0;
}

// A sum, or for p = inf a maximum in which NaN wins.
double fold(double acc, double term, NormKind kind) {
  if (kind != NormKind::inf) return acc + term;
  if (std::isnan(acc) || std::isnan(term)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(acc, term);
}

double finish_norm(double folded, NormKind kind, double p) {
  switch (kind) {
    case NormKind::two: return std::sqrt(folded);
    case NormKind::power: return std::pow(folded, 1.0 / p);
    case NormKind::one:
    case NormKind::inf: return folded;
  }
  return folded;
}

constexpr int64_t kSpan = 512;
constexpr int64_t kParallelGrain = int64_t{1} << 16;

void norm_partial(const Tensor& x, double p, const Tensor& partials, int64_t index) {
  const NormKind kind = norm_kind(p);
  double* row = static_cast<double*>(partials.data_ptr()) + index * kNormPartialBlocks;
  const int64_t n = x.numel();
  const int64_t chunk = (n + kNormPartialBlocks - 1) / kNormPartialBlocks;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t s = 0; s < kNormPartialBlocks; ++s) {
    alignas(64) float buf[kSpan];
    const int64_t end = std::min(n, (s + 1) * chunk);
    double acc = 0.0;
    for (int64_t offset = std::min(n, s * chunk); offset < end; offset += kSpan) {
      const int64_t count = std::min(kSpan, end - offset);
      const float* values = widen_span(x, offset, count, buf);
      for (int64_t i = 0; i < count; ++i) acc = fold(acc, norm_term(values[i], kind, p), kind);
    }
    row[s] = acc;
  }
}

void norm_combine(const Tensor& partials, int64_t count, double p, double max_norm, ClipRule rule,
                  const Tensor& result) {
  const NormKind kind = norm_kind(p);
  const auto* rows = static_cast<const double*>(partials.data_ptr());
  double total = 0.0;
  for (int64_t t = 0; t < count; ++t) {
    double acc = 0.0;
    for (int64_t s = 0; s < kNormPartialBlocks; ++s) {
      acc = fold(acc, rows[t * kNormPartialBlocks + s], kind);
    }
    const auto norm = static_cast<float>(finish_norm(acc, kind, p));
    total = fold(total, norm_term(norm, kind, p), kind);
  }
  const float norm = count == 0 ? 0.0f : static_cast<float>(finish_norm(total, kind, p));
  float* out = result.data<float>();
  out[0] = norm;
  const float shifted = norm + 1e-6f;
  if (rule == ClipRule::torch) {
    const float coef = (1.0f / shifted) * static_cast<float>(max_norm);
    out[1] = coef > 1.0f ? 1.0f : coef;  // torch.clamp(max=1) keeps NaN
  } else {
    const float coef = static_cast<float>(max_norm) / shifted;
    out[1] = coef < 1.0f ? coef : 1.0f;  // std::min(1.0f, coef)
  }
}

}  // namespace

void fill_grad_check_kernels(GradCheckKernels& kernels) {
  kernels.norm_partial = norm_partial;
  kernels.norm_combine = norm_combine;
}

}  // namespace headroom::cpu
