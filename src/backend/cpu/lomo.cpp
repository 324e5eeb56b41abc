// LOMO's CPU kernel, the lomo table's entry (backend/lomo_kernels.h): Lomo.fuse_update on
// parameters f32 / bf16 / f16 updated in place in fp32 and rounded once, gradients in their own
// dtype, the clip factor read from norm_combine's result.
#include <algorithm>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/optimizer_spans.h"
#include "backend/lomo_kernels.h"

namespace headroom::cpu {

namespace {

// Lomo.fuse_update per element, every product rounded (as the NumPy transcription in
// tools/gen_optim_golden.py): clamp, scale by the clip factor, decay, step.
void lomo_update(const Tensor& param, const Tensor& grad, const Tensor& clip_factor,
                 const LomoKernels::Coefficients& c) {
  ensure_flush_denormal();
  const bool clip_norm = clip_factor.defined();
  const float factor = clip_norm ? clip_factor.data<float>()[1] : 1.0f;
  for_each_optimizer_span(param, grad, [&](float* p, const float* g, int64_t, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      float gi = g[i];
      if (c.clip_value) gi = std::min(std::max(gi, -c.clip_grad_value), c.clip_grad_value);
      if (clip_norm) gi = gi * factor;
      float pi = p[i];
      if (c.decay) pi = pi * c.decay_factor;
      p[i] = pi - gi * c.lr;
    }
  });
}

}  // namespace

void fill_lomo_kernels(LomoKernels& kernels) { kernels.update = lomo_update; }

}  // namespace headroom::cpu
