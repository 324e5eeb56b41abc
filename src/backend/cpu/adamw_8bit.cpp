// bitsandbytes' 32-bit and 8-bit blockwise Adam kernels on the CPU, and the adamw_8bit table's
// entries (backend/adamw_8bit_kernels.h). CMakeLists.txt compiles this file with
// -ffp-contract=off, so every product and sum rounds as written (and as
// tools/gen_adamw8bit_golden.py computes them in NumPy).
#include "backend/cpu/adamw_8bit.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/adamw_8bit_kernels.h"
#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "core/dtype_convert.h"

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

namespace {

constexpr int64_t kBlock = kAdam8bitBlockSize;

// The gradient of elements [begin, begin + count) as fp32: a pointer into it, or a widened copy.
const float* grad_block(const void* grad, DType grad_dtype, int64_t begin, int64_t count,
                        float* buffer) {
  if (grad_dtype == DType::f32) return static_cast<const float*>(grad) + begin;
  const char* bytes = static_cast<const char*>(grad) + begin * dtype_size(grad_dtype);
  convert_to_f32(bytes, grad_dtype, buffer, static_cast<size_t>(count));
  return buffer;
}

// Where to update elements [begin, begin + count) of the parameter in fp32: the parameter itself
// when it is f32, else its values widened into `buffer`, which store_param_block rounds back.
float* param_block(void* param, DType param_dtype, int64_t begin, int64_t count, float* buffer) {
  if (param_dtype == DType::f32) return static_cast<float*>(param) + begin;
  convert_to_f32(static_cast<const char*>(param) + begin * dtype_size(param_dtype), param_dtype,
                 buffer, static_cast<size_t>(count));
  return buffer;
}
void store_param_block(const float* p, void* param, DType param_dtype, int64_t begin,
                       int64_t count) {
  if (param_dtype == DType::f32) return;
  convert_from_f32(p, static_cast<char*>(param) + begin * dtype_size(param_dtype), param_dtype,
                   static_cast<size_t>(count));
}

int thread_count(int64_t blocks) {
  return static_cast<int>(std::clamp<int64_t>(blocks / 64, 1, omp_get_max_threads()));
}

}  // namespace

void bnb_adam32_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                       float* exp_avg, float* exp_avg_sq, int64_t n,
                       const BnbAdamCoefficients& c) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) num_threads(thread_count(blocks)) if (blocks >= 128)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    alignas(64) float buffer[kBlock], param_buffer[kBlock];
    const float* g = grad_block(grad, grad_dtype, begin, count, buffer);
    float* p = param_block(param, param_dtype, begin, count, param_buffer);
    float* m = exp_avg + begin;
    float* v = exp_avg_sq + begin;
    for (int64_t i = 0; i < count; ++i) {
      m[i] = m[i] * c.beta1 + c.one_minus_beta1 * g[i];
      v[i] = v[i] * c.beta2 + c.one_minus_beta2 * (g[i] * g[i]);
      p[i] = p[i] + c.step_size * (m[i] / (std::sqrt(v[i]) + c.eps_correction2));
      p[i] = p[i] * c.decay;
    }
    store_param_block(p, param, param_dtype, begin, count);
  }
}

void bnb_adam8bit_blockwise_update(void* param, DType param_dtype, const void* grad,
                                   DType grad_dtype,
                                   const Adam8bitState& state, int64_t n,
                                   const BnbAdamCoefficients& c) {
  const QuantizationMap& q1 = *state.signed_map;
  const QuantizationMap& q2 = *state.unsigned_map;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) num_threads(thread_count(blocks)) if (blocks >= 128)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    alignas(64) float buffer[kBlock], param_buffer[kBlock], m[kBlock], v[kBlock];
    const float* g = grad_block(grad, grad_dtype, begin, count, buffer);
    uint8_t* c1 = state.exp_avg + begin;
    uint8_t* c2 = state.exp_avg_sq + begin;
    const float old_max1 = state.absmax1[b], old_max2 = state.absmax2[b];
    // The CUDA block's lanes past the end of a short last block load g = 0 and codes 128 / 0;
    // their m joins the absmax reduction (their v is 0).
    float max1 = count < kBlock ? std::fabs(q1[128] * old_max1 * c.beta1) : 0.0f;
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
    state.absmax1[b] = max1;
    state.absmax2[b] = max2;
    float* p = param_block(param, param_dtype, begin, count, param_buffer);
    for (int64_t i = 0; i < count; ++i) {
      if (!std::isfinite(g[i])) continue;
      p[i] = p[i] + c.step_size * (m[i] / (std::sqrt(v[i]) + c.eps_correction2));
      p[i] = p[i] * c.decay;
    }
    store_param_block(p, param, param_dtype, begin, count);
    for (int64_t i = 0; i < count; ++i) {
      uint8_t code = quantize_nearest(q1, m[i] / max1);
      if (std::signbit(q1[code]) != std::signbit(m[i])) code += m[i] > 0.0f ? 1 : -1;
      c1[i] = code;
      c2[i] = quantize_nearest(q2, v[i] / max2);
    }
  }
}

namespace {

// The table's entries on the tensors' own dtypes. The dynamic maps are this file's own, made
// once (the CUDA kernels keep theirs in constant memory).
const QuantizationMap& signed_map() {
  static const QuantizationMap map = create_dynamic_map(true);
  return map;
}
const QuantizationMap& unsigned_map() {
  static const QuantizationMap map = create_dynamic_map(false);
  return map;
}

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
                                 .signed_map = &signed_map(),
                                 .unsigned_map = &unsigned_map()},
                                param.numel(), c);
}

}  // namespace

void fill_adamw_8bit_kernels(AdamW8bitKernels& kernels) {
  kernels.update_32bit = adam32_update;
  kernels.update_8bit = adam8bit_update;
}

}  // namespace headroom::cpu
