// The AdamW kernel in PyTorch 1.13's order of operations, with an AVX2+FMA variant chosen at run
// time, and the adamw table's entry (backend/adamw_kernels.h) that takes the tensors in their own
// dtypes. CMakeLists.txt compiles this file with -fno-math-errno (so sqrt vectorises) and
// -ffp-contract=off (so only the fused multiply-adds written here are fused, as in PyTorch).
#include "backend/cpu/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/adamw_kernels.h"
#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "core/dtype_convert.h"
#include "core/error.h"

namespace headroom::cpu {

// Note [AdamW order of operations]
// torch.optim.AdamW's single-tensor path (torch/optim/adamw.py, 1.13) runs, per parameter,
//   param.mul_(1 - lr*wd); exp_avg.mul_(beta1).add_(grad, alpha=1-beta1);
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2);
//   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps);
//   param.addcdiv_(exp_avg, denom, value=-lr/bias_correction1)
// with every scalar rounded to float. Its AVX2 CPU kernels (Debian's build) compute, as we
// checked bit for bit against NumPy emulations on 10^5 random elements:
//   m = fma(g, 1-b1, m*b1)            add_ with alpha is vec::fmadd(b, alpha, a)
//   v = fma((1-b2)*g, g, v*b2)        addcmul's a + value*b*c, the last multiply-add fused
//   p = p*decay + ((-step)*m) / (sqrt(v)/bc2_sqrt + eps)   addcdiv is not fused, nor is the rest
// Without FMA, PyTorch's default kernels round each product; the portable variant does the same.

namespace {

// Elements per thread below which the fork costs more than the update (memory-bound: ~20 bytes
// per element).
constexpr int64_t kGrain = 1 << 15;

template <bool kFused>
inline float multiply_add(float a, float b, float c) {
  if constexpr (kFused) {
    return std::fma(a, b, c);
  } else {
    return a * b + c;
  }
}

template <bool kFused>
inline void update_range(float* __restrict param, const float* __restrict grad,
                         float* __restrict exp_avg, float* __restrict exp_avg_sq, int64_t n,
                         const AdamWCoefficients c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float m = multiply_add<kFused>(g, c.one_minus_beta1, exp_avg[i] * c.beta1);
    const float v = multiply_add<kFused>(c.one_minus_beta2 * g, g, exp_avg_sq[i] * c.beta2);
    const float denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
    param[i] = param[i] * c.decay + (c.neg_step_size * m) / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

void update_portable(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                     const AdamWCoefficients& c) {
  update_range<false>(param, grad, exp_avg, exp_avg_sq, n, c);
}

using UpdateFn = void (*)(float*, const float*, float*, float*, int64_t, const AdamWCoefficients&);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) void update_avx2_fma(float* param, const float* grad,
                                                         float* exp_avg, float* exp_avg_sq,
                                                         int64_t n, const AdamWCoefficients& c) {
  update_range<true>(param, grad, exp_avg, exp_avg_sq, n, c);
}

UpdateFn choose_update() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return update_avx2_fma;
  return update_portable;
}
#else
UpdateFn choose_update() { return update_portable; }
#endif

}  // namespace

void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWCoefficients& c) {
  static const UpdateFn update = choose_update();
  const int64_t threads = std::clamp<int64_t>(n / kGrain, 1, omp_get_max_threads());
  if (threads == 1) {
    update(param, grad, exp_avg, exp_avg_sq, n, c);
    return;
  }
  // Chunks of whole 64-byte lines, so that no two threads write one cache line.
  const int64_t chunk = ((n + threads - 1) / threads + 15) & ~int64_t{15};
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = std::min(n, t * chunk);
    const int64_t count = std::min(n, begin + chunk) - begin;
    update(param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin, count, c);
  }
}

namespace {

// Elements per block: the arrays are widened into fp32 buffers of this size with the vectorised
// bulk converters, updated with vectorisable fp32 arithmetic, and rounded back the same way.
constexpr int64_t kBlock = 512;

const void* offset_by(const void* p, DType dtype, int64_t elements) {
  return static_cast<const char*>(p) + static_cast<size_t>(elements) * dtype_size(dtype);
}
void* offset_by(void* p, DType dtype, int64_t elements) {
  return static_cast<char*>(p) + static_cast<size_t>(elements) * dtype_size(dtype);
}

// Elements [begin, begin + n) of the update; `begin` (a multiple of 4) indexes the random stream.
void update_mixed_range(const AdamWTensors& t, int64_t begin, int64_t n,
                        const AdamWCoefficients& c) {
  alignas(64) float p[kBlock], g[kBlock], m[kBlock], v[kBlock], comp[kBlock];
  for (int64_t start = begin; start < begin + n; start += kBlock) {
    const int64_t count = std::min(kBlock, begin + n - start);
    const size_t size = static_cast<size_t>(count);
    convert_to_f32(offset_by(t.param, t.param_dtype, start), t.param_dtype, p, size);
    convert_to_f32(offset_by(t.grad, t.grad_dtype, start), t.grad_dtype, g, size);
    convert_to_f32(offset_by(t.exp_avg, t.state_dtype, start), t.state_dtype, m, size);
    convert_to_f32(offset_by(t.exp_avg_sq, t.state_dtype, start), t.state_dtype, v, size);
    if (t.compensation) convert_to_f32(t.compensation + start, DType::bf16, comp, size);
      // The update of adamw_update's portable variant, then, with a compensation buffer, optimi's
      // Kahan step: the total change c = comp + (p_new - p) is applied rounded, and what rounding
      // lost is kept for the next step (comp = c - (round(p + c) - p)).
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) {
      const float mi = g[i] * c.one_minus_beta1 + m[i] * c.beta1;
      const float vi = (c.one_minus_beta2 * g[i]) * g[i] + v[i] * c.beta2;
      const float denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;
      const float updated = p[i] * c.decay + (c.neg_step_size * mi) / denom;
      m[i] = mi;
      v[i] = vi;
      if (t.compensation) {
        comp[i] += updated - p[i];
        g[i] = p[i];            // the old value, for the compensation below
        p[i] = p[i] + comp[i];  // rounded to the parameter's dtype when stored
      } else {
        p[i] = updated;
      }
    }
    convert_from_f32(m, offset_by(t.exp_avg, t.state_dtype, start), t.state_dtype, size);
    convert_from_f32(v, offset_by(t.exp_avg_sq, t.state_dtype, start), t.state_dtype, size);
    void* param = offset_by(t.param, t.param_dtype, start);
    if (t.param_dtype == DType::f32) {
      std::copy(p, p + count, static_cast<float*>(param));
    } else if (t.compensation) {
      convert_from_f32(p, param, t.param_dtype, size);
      convert_to_f32(param, t.param_dtype, v, size);  // the stored values
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) comp[i] -= v[i] - g[i];
      convert_from_f32(comp, t.compensation + start, DType::bf16, size);
    } else if (t.stochastic) {
      // Element i draws word i % 4 of block offset + i / 4 of the stream, wherever it starts.
      const PhiloxState rng{t.rng.seed, t.rng.offset + static_cast<uint64_t>(start) / 4};
      convert_from_f32_stochastic(p, param, t.param_dtype, size, rng);
    } else {
      convert_from_f32(p, param, t.param_dtype, size);
    }
  }
}

bool supported_mix(const AdamWTensors& t) {
  auto floating = [](DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; };
  return floating(t.param_dtype) && floating(t.grad_dtype) &&
         (t.state_dtype == DType::f32 || t.state_dtype == DType::bf16);
}

}  // namespace

void adamw_update_mixed(const AdamWTensors& t, int64_t n, const AdamWCoefficients& c) {
  if (!supported_mix(t)) {
    throw NotImplementedError(str_cat("adamw_update_mixed: parameter ", dtype_name(t.param_dtype),
                                      ", gradient ", dtype_name(t.grad_dtype), ", state ",
                                      dtype_name(t.state_dtype), " is not a supported mix"));
  }
  const int64_t threads = std::clamp<int64_t>(n / kGrain, 1, omp_get_max_threads());
  // Chunks of whole blocks, so every chunk but the last starts on a multiple of kBlock.
  const int64_t chunk = ((n + threads - 1) / threads + kBlock - 1) / kBlock * kBlock;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t t_index = 0; t_index < threads; ++t_index) {
    const int64_t begin = std::min(n, t_index * chunk);
    const int64_t count = std::min(n, begin + chunk) - begin;
    if (count > 0) update_mixed_range(t, begin, count, c);
  }
}

namespace {

// One parameter: all-f32 tensors take the fused fp32 kernel; any other mix (16-bit
// parameters updated in place, 16-bit gradients or states) the blockwise one.
void adamw_update_tensor(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                         const Tensor& exp_avg_sq, const Tensor& compensation, bool stochastic,
                         PhiloxState rng, const AdamWCoefficients& c) {
  if (param.dtype() == DType::f32 && grad.dtype() == DType::f32 && exp_avg.dtype() == DType::f32) {
    adamw_update(param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                 exp_avg_sq.data<float>(), param.numel(), c);
    return;
  }
  adamw_update_mixed(
      {.param = param.data_ptr(),
       .param_dtype = param.dtype(),
       .grad = grad.data_ptr(),
       .grad_dtype = grad.dtype(),
       .exp_avg = exp_avg.data_ptr(),
       .exp_avg_sq = exp_avg_sq.data_ptr(),
       .state_dtype = exp_avg.dtype(),
       .compensation = compensation.defined() ? compensation.data<BFloat16>() : nullptr,
       .stochastic = stochastic,
       .rng = rng},
      param.numel(), c);
}

// The list entry: each parameter in turn, as above.
void adamw_update_list(TensorList params, TensorList grads, TensorList exp_avgs,
                       TensorList exp_avg_sqs, TensorList compensations, bool stochastic,
                       std::span<const PhiloxState> rngs, const AdamWCoefficients& c) {
  ensure_flush_denormal();
  HEADROOM_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                     exp_avg_sqs.size() == params.size() &&
                     (compensations.empty() || compensations.size() == params.size()) &&
                     (!stochastic || rngs.size() == params.size()),
                 "cpu adamw update: lists of ", params.size(), " parameters, ", grads.size(),
                 " gradients, ", exp_avgs.size(), " and ", exp_avg_sqs.size(), " states, ",
                 compensations.size(), " compensations, ", rngs.size(), " generators");
  for (size_t i = 0; i < params.size(); ++i) {
    adamw_update_tensor(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i],
                        compensations.empty() ? Tensor() : compensations[i], stochastic,
                        stochastic ? rngs[i] : PhiloxState{}, c);
  }
}

}  // namespace

void fill_adamw_kernels(AdamWKernels& kernels) { kernels.update = adamw_update_list; }

}  // namespace headroom::cpu
