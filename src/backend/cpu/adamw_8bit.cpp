// bitsandbytes' 32-bit and 8-bit blockwise Adam kernels on the CPU, and the adamw_8bit table's
// entries (backend/adamw_8bit_kernels.h). CMakeLists.txt compiles this file with
// -ffp-contract=off, so every product and sum rounds as written (and as
// tools/gen_adamw8bit_golden.py computes them in NumPy).
#include "backend/cpu/adamw_8bit.h"

#include <cmath>

#include "backend/adamw_8bit_kernels.h"
#include "backend/cpu/backend_parts.h"
#include "backend/cpu/bnb_optimizer_blocks.h"
#include "backend/cpu/denormals.h"

namespace headroom::cpu {

// Note [bitsandbytes AdamW order of operations]
// bitsandbytes (csrc kernels kOptimizer32bit2State and kOptimizerStatic8bit2StateBlockwise, with
// gnorm_scale 1 and no max_unorm) computes, per element in fp32:
//   32-bit: m = m*b1 + (1-b1)*g;          v = v*b2 + (1-b2)*(g*g)
//    8-bit: m = q1[c1]*absmax1*b1 + (1-b1)*g;  v = (q2[c2]*absmax2)*b2 + ((1-b2)*g)*g
//   p = p + step_size * (m / (sqrt(v) + eps*correction2));  then p = p * (1 - lr*wd)
// so weight decay follows the Adam step (torch decays first) and eps is scaled by
// sqrt(1 - b2^t) because the bias corrections are folded into step_size. The 8-bit kernel skips
// elements whose gradient is NaN or inf (their m and v become 0, the parameter stays), takes each
// block's new absmax over the fp32 m and v before quantizing, and nudges a code of m whose value
// has the wrong sign one step towards the right one, so that a small negative m never becomes 0.
// On the GPU the divisions are __fdividef (2 ulp); here they round correctly.
//
// Note [bitsandbytes 16-bit parameters]
// For a bf16 or f16 parameter bitsandbytes' CUDA kernels (the same templates, T = the parameter's
// type; its states stay fp32 / 8-bit as for f32) keep the parameter in a register of type T and
// assign fp32 results to it, so a value is rounded to nearest-even each time it is assigned:
//   Adam (kOptimizer32bit2State, kOptimizerStatic8bit2StateBlockwise):
//     p = T(p + step_size * (m / (sqrt(v) + eps*correction2)));  p = T(p * (1 - lr*wd))
//   Lion (kOptimizer32bit1State):  p = T(p * (1 - lr*wd));  p = T(p - lr*sign(...))
//   Lion (kOptimizerStatic8bit1StateBlockwise):  p = T(p * (1 - lr*wd));  u = T(lr*sign(...));
//     p = T(p - u)   (the step lr*sign is itself kept in a T register, the gradient's)
// (the decay only when wd > 0, where multiplying by 1 would round nothing anyway). The CPU kernels
// here round at the same points, so a bf16 parameter is rounded twice per step, and a decay
// smaller than half an ulp of bf16 is lost, as on a GPU with bitsandbytes. bitsandbytes' own CPU
// backend (backends/cpu/ops.py, PyTorch ops in fp32) rounds once, at the end, and decays first;
// tests/optim/test_bnb_16bit_golden.cpp says what that changes.

void bnb_adam32_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                       float* exp_avg, float* exp_avg_sq, int64_t n, const BnbAdamCoefficients& c) {
  for_each_bnb_block(param, param_dtype, grad, grad_dtype, n, [&](const BnbBlock& block) {
    const float* g = block.grad;
    float* p = block.param;
    float* m = exp_avg + block.begin;
    float* v = exp_avg_sq + block.begin;
    for (int64_t i = 0; i < block.count; ++i) {
      m[i] = m[i] * c.beta1 + c.one_minus_beta1 * g[i];
      v[i] = v[i] * c.beta2 + c.one_minus_beta2 * (g[i] * g[i]);
      p[i] = p[i] + c.step_size * (m[i] / (std::sqrt(v[i]) + c.eps_correction2));
    }
    bnb_round_through(p, block.count, param_dtype);  // Note [bitsandbytes 16-bit parameters]
    for (int64_t i = 0; i < block.count; ++i) p[i] = p[i] * c.decay;
  });
}

void bnb_adam8bit_blockwise_update(void* param, DType param_dtype, const void* grad,
                                   DType grad_dtype, const Adam8bitState& state, int64_t n,
                                   const BnbAdamCoefficients& c) {
  const QuantizationMap& q1 = *state.signed_map;
  const QuantizationMap& q2 = *state.unsigned_map;
  for_each_bnb_block(param, param_dtype, grad, grad_dtype, n, [&](const BnbBlock& block) {
    const int64_t count = block.count;
    const float* g = block.grad;
    float* p = block.param;
    alignas(64) float m[kAdam8bitBlockSize], v[kAdam8bitBlockSize];
    uint8_t* c1 = state.exp_avg + block.begin;
    uint8_t* c2 = state.exp_avg_sq + block.begin;
    const float old_max1 = state.absmax1[block.index], old_max2 = state.absmax2[block.index];
    // The CUDA block's lanes past the end of a short last block load g = 0 and codes 128 / 0;
    // their m joins the absmax reduction (their v is 0).
    float max1 = count < kAdam8bitBlockSize ? std::fabs(q1[128] * old_max1 * c.beta1) : 0.0f;
    float max2 = 0.0f;
    for (int64_t i = 0; i < count; ++i) {
      if (std::isfinite(g[i])) {
        v[i] = (q2[c2[i]] * old_max2) * c.beta2 + (c.one_minus_beta2 * g[i]) * g[i];
        m[i] = (q1[c1[i]] * old_max1) * c.beta1 + c.one_minus_beta1 * g[i];
      } else {
        m[i] = 0.0f;
        v[i] = 0.0f;
      }
      max1 = std::fmax(max1, std::fabs(m[i]));
      max2 = std::fmax(max2, std::fabs(v[i]));
    }
    state.absmax1[block.index] = max1;
    state.absmax2[block.index] = max2;
    for (int64_t i = 0; i < count; ++i) {
      if (!std::isfinite(g[i])) continue;
      p[i] = p[i] + c.step_size * (m[i] / (std::sqrt(v[i]) + c.eps_correction2));
    }
    // Skipped elements hold values of the dtype already, which the rounding keeps.
    bnb_round_through(p, count, param_dtype);  // Note [bitsandbytes 16-bit parameters]
    for (int64_t i = 0; i < count; ++i) {
      if (std::isfinite(g[i])) p[i] = p[i] * c.decay;
    }
    for (int64_t i = 0; i < count; ++i) {
      uint8_t code = quantize_nearest(q1, m[i] / max1);
      if (std::signbit(q1[code]) != std::signbit(m[i])) code += m[i] > 0.0f ? 1 : -1;
      c1[i] = code;
      c2[i] = quantize_nearest(q2, v[i] / max2);
    }
  });
}

namespace {

// The table's entries on the tensors' own dtypes.
void adam32_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                   const Tensor& state2, const BnbAdamCoefficients& c) {
  ensure_flush_denormal();
  bnb_adam32_update(param.data_ptr(), param.dtype(), grad.data_ptr(), grad.dtype(),
                    state1.data<float>(), state2.data<float>(), param.numel(), c);
}

void adam8bit_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                     const Tensor& state2, const Tensor& absmax1, const Tensor& absmax2,
                     const BnbAdamCoefficients& c) {
  ensure_flush_denormal();
  bnb_adam8bit_blockwise_update(param.data_ptr(), param.dtype(), grad.data_ptr(), grad.dtype(),
                                {.exp_avg = state1.data<uint8_t>(),
                                 .exp_avg_sq = state2.data<uint8_t>(),
                                 .absmax1 = absmax1.data<float>(),
                                 .absmax2 = absmax2.data<float>(),
                                 .signed_map = &bnb_signed_map(),
                                 .unsigned_map = &bnb_unsigned_map()},
                                param.numel(), c);
}

}  // namespace

void fill_adamw_8bit_kernels(AdamW8bitKernels& kernels) {
  kernels.update_32bit = adam32_update;
  kernels.update_8bit = adam8bit_update;
}

}  // namespace headroom::cpu
