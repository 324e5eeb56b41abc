// bitsandbytes' 32-bit and 8-bit blockwise Lion kernels on the CPU, and the lion_8bit table's
// entries (backend/lion_8bit_kernels.h). CMakeLists.txt compiles this file with -ffp-contract=off,
// so every product and sum rounds as written.
#include "backend/cpu/lion_8bit.h"

#include <cmath>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/bnb_optimizer_blocks.h"
#include "backend/cpu/denormals.h"
#include "backend/lion_8bit_kernels.h"

namespace headroom::cpu {

// Note [bitsandbytes Lion]
// bitsandbytes' Lion (csrc kernels kOptimizer32bit1State and kOptimizerStatic8bit1StateBlockwise
// with OPTIMIZER = LION, gnorm_scale 1, no max_unorm, skip_zeros off) per element in fp32:
//   if wd > 0: p = p * (1 - lr*wd)           (decoupled decay, first)
//   u = lr * sign(m*b1 + (1-b1)*g);  p = p - u;  m = m*b2 + (1-b2)*g
// with m = q1[c]*absmax for the 8-bit kernel, whose new absmax is the max |m| over the block,
// lanes past a short last block included (g = 0, code 128: m = q1[128]*absmax*b2), and whose
// codes get the sign nudge of Note [bitsandbytes AdamW order of operations]. Unlike Adam's, these
// kernels do not skip non-finite gradients. For 16-bit parameters, see Note [bitsandbytes 16-bit
// parameters] (in adamw_8bit.cpp) for where the parameter and u are rounded.

namespace {

float sign_of(float x) { return static_cast<float>((0.0f < x) - (x < 0.0f)); }

// p = p * decay, rounded into the parameter's dtype, when the weight decay is on.
void decay_block(float* p, int64_t count, DType param_dtype, const BnbLionCoefficients& c) {
  if (!c.decays) return;
  for (int64_t i = 0; i < count; ++i) p[i] = p[i] * c.decay;
  bnb_round_through(p, count, param_dtype);
}

}  // namespace

void bnb_lion32_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                       float* exp_avg, int64_t n, const BnbLionCoefficients& c) {
  for_each_bnb_block(param, param_dtype, grad, grad_dtype, n, [&](const BnbBlock& block) {
    const float* g = block.grad;
    float* p = block.param;
    float* m = exp_avg + block.begin;
    decay_block(p, block.count, param_dtype, c);
    for (int64_t i = 0; i < block.count; ++i) {
      p[i] = p[i] - c.lr * sign_of(m[i] * c.beta1 + c.one_minus_beta1 * g[i]);
      m[i] = m[i] * c.beta2 + c.one_minus_beta2 * g[i];
    }
  });
}

void bnb_lion8bit_blockwise_update(void* param, DType param_dtype, const void* grad,
                                   DType grad_dtype, uint8_t* exp_avg, float* absmax, int64_t n,
                                   const QuantizationMap& q1, const BnbLionCoefficients& c) {
  for_each_bnb_block(param, param_dtype, grad, grad_dtype, n, [&](const BnbBlock& block) {
    const int64_t count = block.count;
    const float* g = block.grad;
    float* p = block.param;
    alignas(64) float m[kAdam8bitBlockSize], step[kAdam8bitBlockSize];
    uint8_t* codes = exp_avg + block.begin;
    const float old_max = absmax[block.index];
    decay_block(p, count, param_dtype, c);
    float max = count < kAdam8bitBlockSize ? std::fabs(q1[128] * old_max * c.beta2) : 0.0f;
    for (int64_t i = 0; i < count; ++i) {
      const float old_m = q1[codes[i]] * old_max;
      step[i] = c.lr * sign_of(old_m * c.beta1 + c.one_minus_beta1 * g[i]);
      m[i] = old_m * c.beta2 + c.one_minus_beta2 * g[i];
      max = std::fmax(max, std::fabs(m[i]));
    }
    absmax[block.index] = max;
    // bitsandbytes holds the step in a register of T, its parameter's and gradient's type.
    bnb_round_through(step, count, param_dtype);
    for (int64_t i = 0; i < count; ++i) p[i] = p[i] - step[i];
    for (int64_t i = 0; i < count; ++i) {
      uint8_t code = quantize_nearest(q1, m[i] / max);
      if (std::signbit(q1[code]) != std::signbit(m[i])) code += m[i] > 0.0f ? 1 : -1;
      codes[i] = code;
    }
  });
}

namespace {

void lion32_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                   const BnbLionCoefficients& c) {
  ensure_flush_denormal();
  bnb_lion32_update(param.data_ptr(), param.dtype(), grad.data_ptr(), grad.dtype(),
                    state1.data<float>(), param.numel(), c);
}

void lion8bit_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                     const Tensor& absmax1, const BnbLionCoefficients& c) {
  ensure_flush_denormal();
  bnb_lion8bit_blockwise_update(param.data_ptr(), param.dtype(), grad.data_ptr(), grad.dtype(),
                                state1.data<uint8_t>(), absmax1.data<float>(), param.numel(),
                                bnb_signed_map(), c);
}

}  // namespace

void fill_lion_8bit_kernels(Lion8bitKernels& kernels) {
  kernels.update_32bit = lion32_update;
  kernels.update_8bit = lion8bit_update;
}

}  // namespace headroom::cpu
