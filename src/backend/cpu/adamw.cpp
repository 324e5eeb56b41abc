// The AdamW kernel in PyTorch 1.13's order of operations, with an AVX2+FMA variant chosen at run
// time. CMakeLists.txt compiles this file with -fno-math-errno (so sqrt vectorises) and
// -ffp-contract=off (so only the fused multiply-adds written here are fused, as in PyTorch).
#include "backend/cpu/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

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

void update_portable(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                     int64_t n, const AdamWCoefficients& c) {
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

template <typename T>
inline float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}

template <typename T>
inline T round_nearest(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return T(x);
  }
}

template <typename P>
inline P round_stochastic(float x, uint32_t random_bits) {
  if constexpr (std::is_same_v<P, BFloat16>) {
    return BFloat16::from_bits(f32_to_bf16_bits_stochastic(x, random_bits));
  } else {
    return Half::from_bits(f32_to_f16_bits_stochastic(x, random_bits));
  }
}

// Elements [begin, begin + n) of the update; `begin` indexes the random stream.
template <typename P, typename G, typename S>
void update_mixed_range(const AdamWTensors& t, int64_t begin, int64_t n,
                        const AdamWCoefficients& c) {
  P* param = static_cast<P*>(t.param) + begin;
  const G* grad = static_cast<const G*>(t.grad) + begin;
  S* exp_avg = static_cast<S*>(t.exp_avg) + begin;
  S* exp_avg_sq = static_cast<S*>(t.exp_avg_sq) + begin;
  BFloat16* comp = t.compensation ? t.compensation + begin : nullptr;
  Philox4x32Block block{};
  for (int64_t i = 0; i < n; ++i) {
    const float g = load(grad, i);
    const float m = g * c.one_minus_beta1 + load(exp_avg, i) * c.beta1;
    const float v = (c.one_minus_beta2 * g) * g + load(exp_avg_sq, i) * c.beta2;
    const float denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
    const float p = load(param, i);
    const float updated = p * c.decay + (c.neg_step_size * m) / denom;
    exp_avg[i] = round_nearest<S>(m);
    exp_avg_sq[i] = round_nearest<S>(v);
    if constexpr (std::is_same_v<P, float>) {
      param[i] = updated;
    } else if (comp) {
      const float total = static_cast<float>(comp[i]) + (updated - p);
      const P rounded = P(p + total);
      comp[i] = BFloat16(total - (static_cast<float>(rounded) - p));
      param[i] = rounded;
    } else if (t.stochastic) {
      const uint64_t index = static_cast<uint64_t>(begin + i);
      if (i == 0 || index % 4 == 0) block = philox_block(t.rng.seed, t.rng.offset + index / 4);
      param[i] = round_stochastic<P>(updated, block.word[index % 4]);
    } else {
      param[i] = P(updated);
    }
  }
}

using MixedFn = void (*)(const AdamWTensors&, int64_t, int64_t, const AdamWCoefficients&);

template <typename P, typename G>
MixedFn choose_state(DType state) {
  if (state == DType::f32) return update_mixed_range<P, G, float>;
  if (state == DType::bf16) return update_mixed_range<P, G, BFloat16>;
  return nullptr;
}

template <typename P>
MixedFn choose_grad(DType grad, DType state) {
  if (grad == DType::f32) return choose_state<P, float>(state);
  if (grad == DType::bf16) return choose_state<P, BFloat16>(state);
  if (grad == DType::f16) return choose_state<P, Half>(state);
  return nullptr;
}

MixedFn choose_mixed(const AdamWTensors& t) {
  if (t.param_dtype == DType::f32) return choose_grad<float>(t.grad_dtype, t.state_dtype);
  if (t.param_dtype == DType::bf16) return choose_grad<BFloat16>(t.grad_dtype, t.state_dtype);
  if (t.param_dtype == DType::f16) return choose_grad<Half>(t.grad_dtype, t.state_dtype);
  return nullptr;
}

}  // namespace

void adamw_update_mixed(const AdamWTensors& t, int64_t n, const AdamWCoefficients& c) {
  const MixedFn update = choose_mixed(t);
  if (!update) {
    throw NotImplementedError(str_cat("adamw_update_mixed: parameter ", dtype_name(t.param_dtype),
                                      ", gradient ", dtype_name(t.grad_dtype), ", state ",
                                      dtype_name(t.state_dtype), " is not a supported mix"));
  }
  const int64_t threads = std::clamp<int64_t>(n / kGrain, 1, omp_get_max_threads());
  // Chunks of whole 64-byte lines of the narrowest array, the same for any thread count.
  const int64_t chunk = ((n + threads - 1) / threads + 31) & ~int64_t{31};
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t t_index = 0; t_index < threads; ++t_index) {
    const int64_t begin = std::min(n, t_index * chunk);
    const int64_t count = std::min(n, begin + chunk) - begin;
    if (count > 0) update(t, begin, count, c);
  }
}

}  // namespace headroom::cpu
