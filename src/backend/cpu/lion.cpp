// Lion's CPU kernel, the lion table's entry (backend/lion_kernels.h): parameters f32 / bf16 / f16
// updated in place in fp32 and rounded once, gradients in their own dtype, exp_avg f32.
#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/optimizer_spans.h"
#include "backend/lion_kernels.h"

namespace headroom::cpu {

namespace {

// Note [Lion update]
// lion_pytorch's step, per element, every scalar rounded to float and every product rounded
// (no fused multiply-add, as the NumPy transcription in tools/gen_optim_golden.py):
//   p = p * (1 - lr*wd);  u = sign(m*beta1 + g*(1-beta1));  p = p - u*lr;
//   m = m*beta2 + g*(1-beta2)
// sign(0) = 0, so an element whose interpolation is exactly 0 does not move.
void lion_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const LionKernels::Coefficients& c) {
  ensure_flush_denormal();
  float* exp_avg_data = exp_avg.data<float>();
  for_each_optimizer_span(
      param, grad, [&](float* p, const float* g, int64_t offset, int64_t count) {
        float* m = exp_avg_data + offset;
        for (int64_t i = 0; i < count; ++i) {
          const float interpolated = m[i] * c.beta1 + g[i] * c.one_minus_beta1;
          const float sign = static_cast<float>((interpolated > 0.0f) - (interpolated < 0.0f));
          p[i] = p[i] * c.decay - sign * c.lr;
          m[i] = m[i] * c.beta2 + g[i] * c.one_minus_beta2;
        }
      });
}

}  // namespace

void fill_lion_kernels(LionKernels& kernels) { kernels.update = lion_update; }

}  // namespace headroom::cpu
