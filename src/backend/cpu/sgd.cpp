// SGD's CPU kernel, the sgd table's entry (backend/sgd_kernels.h): torch's update element by
// element with the multiply-adds that PyTorch's AVX2 kernels fuse (add_ with alpha is
// fma(b, alpha, a); see Note [AdamW order of operations]); parameters f32 / bf16 / f16 updated in
// place in fp32 and rounded once, gradients in their own dtype, the momentum buffer f32.
#include <cmath>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/optimizer_spans.h"
#include "backend/sgd_kernels.h"

namespace headroom::cpu {

namespace {

// torch's per-tensor sequence, per element. No buffer: no momentum; `first`: the buffer becomes
// the decayed gradient itself (torch.clone(d_p)).
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, bool first,
                const SgdKernels::Coefficients& c) {
  ensure_flush_denormal();
  float* buffer_data = momentum_buffer.defined() ? momentum_buffer.data<float>() : nullptr;
  for_each_optimizer_span(
      param, grad, [&](float* p, const float* g, int64_t offset, int64_t count) {
        float* buffer = buffer_data != nullptr ? buffer_data + offset : nullptr;
        for (int64_t i = 0; i < count; ++i) {
          float d = g[i];
          if (c.weight_decay != 0.0f) d = std::fma(p[i], c.weight_decay, d);
          if (buffer != nullptr) {
            const float b = first ? d : std::fma(d, c.one_minus_dampening, buffer[i] * c.momentum);
            buffer[i] = b;
            d = c.nesterov ? std::fma(b, c.momentum, d) : b;
          }
          p[i] = std::fma(d, c.neg_lr, p[i]);
        }
      });
}

}  // namespace

void fill_sgd_kernels(SgdKernels& kernels) { kernels.update = sgd_update; }

}  // namespace headroom::cpu
