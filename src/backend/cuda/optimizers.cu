// Fused optimizer updates on the GPU: AdamW (every mix of dtypes of backend/cpu/adamw.h, Kahan
// compensation, stochastic rounding), bitsandbytes' 32-bit and 8-bit blockwise Adam, Lion, SGD,
// Adafactor and LOMO. Each kernel does the CPU kernel's float operations in its order, with the
// _rn intrinsics so that nvcc fuses nothing the CPU does not (and fmaf where it does), so results
// match the CPU reference to the bit except where a reduction order differs (Adafactor's row
// sums). One launch per parameter; no host reads.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cpu/adamw.h"
#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/blockwise_quant.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/backend_parts.h"
#include "core/float_formats.h"
#include "core/philox.h"

namespace headroom::cuda {
namespace {

using AdamWCoefficients = cpu::AdamWCoefficients;
using BnbAdamCoefficients = cpu::BnbAdamCoefficients;

__device__ __forceinline__ float load_f32(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::bf16: return to_f32(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f16: return to_f32(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

template <typename T>
__device__ __forceinline__ T from_bits(uint16_t bits);
template <>
__device__ __forceinline__ __nv_bfloat16 from_bits<__nv_bfloat16>(uint16_t bits) {
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __nv_bfloat16(raw);
}
template <>
__device__ __forceinline__ __half from_bits<__half>(uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half(raw);
}

// f32_to_bf16_bits_stochastic / f32_to_f16_bits_stochastic (core/float_formats.h), as the CPU's
// convert_from_f32_stochastic rounds.
template <typename T>
__device__ __forceinline__ T stochastic_round(float x, uint32_t random_bits) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return from_bits<T>(f32_to_bf16_bits_stochastic(x, random_bits));
  } else {
    return from_bits<T>(f32_to_f16_bits_stochastic(x, random_bits));
  }
}

// ---- AdamW (Note [AdamW order of operations])

struct AdamWArgs {
  void* param;
  const void* grad;
  DType grad_dtype;
  void* exp_avg;
  void* exp_avg_sq;
  __nv_bfloat16* compensation;  // null without Kahan summation
  bool stochastic;
  PhiloxState rng;
  int64_t n;
  AdamWCoefficients c;
};

// The fp32 update of element i: cpu::adamw_update's FMA variant when kFused (all fp32, as
// cpu::adamw_update runs on a CPU with FMA), else the unfused order of cpu::adamw_update_mixed.
// Stores m and v; returns the updated parameter in fp32 and the old one in *old.
template <typename P, typename S, bool kFused>
__device__ __forceinline__ float adamw_element(const AdamWArgs& a, int64_t i, float* old) {
  const AdamWCoefficients& c = a.c;
  S* exp_avg = static_cast<S*>(a.exp_avg);
  S* exp_avg_sq = static_cast<S*>(a.exp_avg_sq);
  const float g = load_f32(a.grad, a.grad_dtype, i);
  const float p = to_f32(static_cast<const P*>(a.param)[i]);
  const float m0 = to_f32(exp_avg[i]), v0 = to_f32(exp_avg_sq[i]);
  float m, v;
  if constexpr (kFused) {
    m = __fmaf_rn(g, c.one_minus_beta1, __fmul_rn(m0, c.beta1));
    v = __fmaf_rn(__fmul_rn(c.one_minus_beta2, g), g, __fmul_rn(v0, c.beta2));
  } else {
    m = __fadd_rn(__fmul_rn(g, c.one_minus_beta1), __fmul_rn(m0, c.beta1));
    v = __fadd_rn(__fmul_rn(__fmul_rn(c.one_minus_beta2, g), g), __fmul_rn(v0, c.beta2));
  }
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.bias_correction2_sqrt), c.eps);
  exp_avg[i] = from_f32<S>(m);
  exp_avg_sq[i] = from_f32<S>(v);
  *old = p;
  return __fadd_rn(__fmul_rn(p, c.decay), __fdiv_rn(__fmul_rn(c.neg_step_size, m), denom));
}

// Writes the updated value of element i to a parameter of dtype P: as it is for f32, else with
// optimi's Kahan step (see cpu::AdamWTensors) or rounded to nearest.
template <typename P>
__device__ __forceinline__ void store_param(const AdamWArgs& a, int64_t i, float updated,
                                            float old) {
  P* param = static_cast<P*>(a.param);
  if (std::is_same_v<P, float> || a.compensation == nullptr) {
    param[i] = from_f32<P>(updated);
    return;
  }
  const float change = __fadd_rn(to_f32(a.compensation[i]), __fsub_rn(updated, old));
  const P stored = from_f32<P>(__fadd_rn(old, change));
  param[i] = stored;
  a.compensation[i] = from_f32<__nv_bfloat16>(__fsub_rn(change, __fsub_rn(to_f32(stored), old)));
}

template <typename P, typename S, bool kFused>
__global__ void adamw_kernel(AdamWArgs a) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < a.n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float old;
    const float updated = adamw_element<P, S, kFused>(a, i, &old);
    store_param<P>(a, i, updated, old);
  }
}

// Stochastic rounding: thread q updates elements 4q .. 4q + 3, which draw the words of block
// rng.offset + q of the stream (element i: word i % 4 of block i / 4, as on the CPU).
template <typename P, typename S>
__global__ void adamw_stochastic_kernel(AdamWArgs a) {
  const int64_t quads = (a.n + 3) / 4;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < quads;
       q += int64_t{gridDim.x} * blockDim.x) {
    const Philox4x32Block random =
        philox_block(a.rng.seed, a.rng.offset + static_cast<uint64_t>(q));
    for (int word = 0; word < 4; ++word) {
      const int64_t i = 4 * q + word;
      if (i >= a.n) break;
      float old;
      const float updated = adamw_element<P, S, false>(a, i, &old);
      static_cast<P*>(a.param)[i] = stochastic_round<P>(updated, random.word[word]);
    }
  }
}

template <typename P, typename S>
void launch_adamw(const AdamWArgs& a, bool fused) {
  const cudaStream_t stream = current_stream();
  if constexpr (!std::is_same_v<P, float>) {
    if (a.stochastic) {
      adamw_stochastic_kernel<P, S><<<blocks_for((a.n + 3) / 4), kThreads, 0, stream>>>(a);
      return;
    }
  }
  if (fused) {
    adamw_kernel<P, S, true><<<blocks_for(a.n), kThreads, 0, stream>>>(a);
  } else {
    adamw_kernel<P, S, false><<<blocks_for(a.n), kThreads, 0, stream>>>(a);
  }
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& compensation, bool stochastic,
                  PhiloxState rng, const AdamWCoefficients& c) {
  check_kernel_dtype("adamw_update", "grad", grad.dtype());
  const DType state = exp_avg.dtype();
  if (state != DType::f32 && state != DType::bf16) {
    check_kernel_dtype("adamw_update", "exp_avg", DType::u8);  // throws, naming the argument
  }
  const AdamWArgs a{.param = param.data_ptr(),
                    .grad = grad.data_ptr(),
                    .grad_dtype = grad.dtype(),
                    .exp_avg = exp_avg.data_ptr(),
                    .exp_avg_sq = exp_avg_sq.data_ptr(),
                    .compensation = compensation.defined()
                                        ? static_cast<__nv_bfloat16*>(compensation.data_ptr())
                                        : nullptr,
                    .stochastic = stochastic && !compensation.defined(),
                    .rng = rng,
                    .n = param.numel(),
                    .c = c};
  if (a.n == 0) return;
  DeviceGuard guard(param.device().index);
  // The CPU takes its FMA kernel only when everything is fp32 (optim/adamw.cpp).
  const bool fused = param.dtype() == DType::f32 && grad.dtype() == DType::f32 &&
                     state == DType::f32;
  HEADROOM_CUDA_DISPATCH_FLOAT(param.dtype(), P, {
    if (state == DType::f32) {
      launch_adamw<P, float>(a, fused);
    } else {
      launch_adamw<P, __nv_bfloat16>(a, fused);
    }
  });
  check_launch();
}

// ---- bitsandbytes' Adam (Note [bitsandbytes AdamW order of operations])

template <typename G>
__global__ void bnb_adam32_kernel(float* param, const G* grad, float* exp_avg, float* exp_avg_sq,
                                  int64_t n, BnbAdamCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(grad[i]);
    const float m = __fadd_rn(__fmul_rn(exp_avg[i], c.beta1), __fmul_rn(c.one_minus_beta1, g));
    const float v = __fadd_rn(__fmul_rn(exp_avg_sq[i], c.beta2),
                              __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float step = __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), c.eps_correction2));
    param[i] = __fmul_rn(__fadd_rn(param[i], __fmul_rn(c.step_size, step)), c.decay);
  }
}

void bnb_adam32_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                       const Tensor& state2, const BnbAdamCoefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), G,
      bnb_adam32_kernel<G><<<blocks_for(n), kThreads, 0, current_stream()>>>(
          param.data<float>(), static_cast<const G*>(grad.data_ptr()), state1.data<float>(),
          state2.data<float>(), n, c));
  check_launch();
}

// The two dynamic maps, passed by value (2 KiB of kernel parameters) and copied to shared memory
// by each block, so no device copy of them has to be kept per GPU.
struct DynamicMaps {
  float signed_code[256];
  float unsigned_code[256];
};

const DynamicMaps& dynamic_maps() {
  static const DynamicMaps maps = [] {
    DynamicMaps m{};
    const cpu::QuantizationMap s = cpu::create_dynamic_map(true);
    const cpu::QuantizationMap u = cpu::create_dynamic_map(false);
    for (int i = 0; i < 256; ++i) {
      m.signed_code[i] = s[static_cast<size_t>(i)];
      m.unsigned_code[i] = u[static_cast<size_t>(i)];
    }
    return m;
  }();
  return maps;
}

// One block per state block of 256 (bitsandbytes' kOptimizerStatic8bit2StateBlockwise with one
// element per thread): lanes past the end load g = 0 and codes 128 / 0, as the CPU kernel models.
constexpr int kQuantBlock = static_cast<int>(cpu::kAdam8bitBlockSize);
static_assert(kQuantBlock == 256, "one thread per element of a state block");

template <typename G>
__global__ void __launch_bounds__(kQuantBlock)
    bnb_adam8bit_kernel(float* param, const G* grad, uint8_t* state1, uint8_t* state2,
                        float* absmax1, float* absmax2, int64_t n, BnbAdamCoefficients c,
                        DynamicMaps maps) {
  __shared__ float q1[256], q2[256];
  __shared__ float warp_max1[kQuantBlock / 32], warp_max2[kQuantBlock / 32];
  const int t = threadIdx.x;
  q1[t] = maps.signed_code[t];
  q2[t] = maps.unsigned_code[t];
  __syncthreads();
  const int64_t block = blockIdx.x;
  const int64_t i = block * kQuantBlock + t;
  const bool valid = i < n;
  const float g = valid ? to_f32(grad[i]) : 0.0f;
  const uint8_t c1 = valid ? state1[i] : uint8_t{128};
  const uint8_t c2 = valid ? state2[i] : uint8_t{0};
  const float old_max1 = absmax1[block], old_max2 = absmax2[block];
  const bool finite = isfinite(g);
  float m = 0.0f, v = 0.0f;
  if (finite) {  // padded lanes too: g = 0
    v = __fadd_rn(__fmul_rn(__fmul_rn(q2[c2], old_max2), c.beta2),
                  __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
    m = __fadd_rn(__fmul_rn(__fmul_rn(q1[c1], old_max1), c.beta1), __fmul_rn(c.one_minus_beta1, g));
  }
  // The block's new absmax over |m| and |v| (fmaxf, as std::fmax: NaN is ignored; the maximum
  // does not depend on the order).
  float max1 = fabsf(m), max2 = fabsf(v);
  for (int offset = 16; offset > 0; offset >>= 1) {
    max1 = fmaxf(max1, __shfl_xor_sync(0xffffffffu, max1, offset));
    max2 = fmaxf(max2, __shfl_xor_sync(0xffffffffu, max2, offset));
  }
  if (t % 32 == 0) {
    warp_max1[t / 32] = max1;
    warp_max2[t / 32] = max2;
  }
  __syncthreads();
  max1 = 0.0f;
  max2 = 0.0f;
  for (int w = 0; w < kQuantBlock / 32; ++w) {
    max1 = fmaxf(max1, warp_max1[w]);
    max2 = fmaxf(max2, warp_max2[w]);
  }
  if (t == 0) {  // every thread read old_max1 / old_max2 before the barrier above
    absmax1[block] = max1;
    absmax2[block] = max2;
  }
  if (!valid) return;
  if (finite) {
    const float step = __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), c.eps_correction2));
    param[i] = __fmul_rn(__fadd_rn(param[i], __fmul_rn(c.step_size, step)), c.decay);
  }
  uint8_t code = cpu::quantize_nearest(q1, __fdiv_rn(m, max1));
  if ((signbit(q1[code]) != 0) != (signbit(m) != 0)) code += m > 0.0f ? 1 : -1;
  state1[i] = code;
  state2[i] = cpu::quantize_nearest(q2, __fdiv_rn(v, max2));
}

void bnb_adam8bit_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                         const Tensor& state2, const Tensor& absmax1, const Tensor& absmax2,
                         const BnbAdamCoefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  if (blocks > 0x7fffffff) throw ValueError("bnb_adam8bit_update: too many state blocks");
  DeviceGuard guard(param.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), G,
      bnb_adam8bit_kernel<G><<<static_cast<unsigned>(blocks), kQuantBlock, 0, current_stream()>>>(
          param.data<float>(), static_cast<const G*>(grad.data_ptr()), state1.data<uint8_t>(),
          state2.data<uint8_t>(), absmax1.data<float>(), absmax2.data<float>(), n, c,
          dynamic_maps()));
  check_launch();
}

// ---- Lion (Note [Lion update]) and SGD (optim/sgd.cpp), parameters rounded to nearest

template <typename P, typename G>
__global__ void lion_kernel(P* param, const G* grad, float* exp_avg, int64_t n,
                            LionKernels::Coefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(grad[i]);
    const float m = exp_avg[i];
    const float interpolated = __fadd_rn(__fmul_rn(m, c.beta1), __fmul_rn(g, c.one_minus_beta1));
    const float sign = static_cast<float>((interpolated > 0.0f) - (interpolated < 0.0f));
    param[i] = from_f32<P>(__fsub_rn(__fmul_rn(to_f32(param[i]), c.decay), __fmul_rn(sign, c.lr)));
    exp_avg[i] = __fadd_rn(__fmul_rn(m, c.beta2), __fmul_rn(g, c.one_minus_beta2));
  }
}

void lion_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const LionKernels::Coefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(param.dtype(), P, HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), G,
      lion_kernel<P, G><<<blocks_for(n), kThreads, 0, current_stream()>>>(
          static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()),
          exp_avg.data<float>(), n, c)));
  check_launch();
}

template <typename P, typename G>
__global__ void sgd_kernel(P* param, const G* grad, float* buffer, bool first, int64_t n,
                           SgdKernels::Coefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float p = to_f32(param[i]);
    float d = to_f32(grad[i]);
    if (c.weight_decay != 0.0f) d = __fmaf_rn(p, c.weight_decay, d);
    if (buffer != nullptr) {
      const float b =
          first ? d : __fmaf_rn(d, c.one_minus_dampening, __fmul_rn(buffer[i], c.momentum));
      buffer[i] = b;
      d = c.nesterov ? __fmaf_rn(b, c.momentum, d) : b;
    }
    param[i] = from_f32<P>(__fmaf_rn(d, c.neg_lr, p));
  }
}

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                bool first, const SgdKernels::Coefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  float* buffer = momentum_buffer.defined() ? momentum_buffer.data<float>() : nullptr;
  HEADROOM_CUDA_DISPATCH_FLOAT(param.dtype(), P, HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), G,
      sgd_kernel<P, G><<<blocks_for(n), kThreads, 0, current_stream()>>>(
          static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()), buffer,
          first, n, c)));
  check_launch();
}

// ---- Adafactor (Note [Adafactor step])

using AdafactorCoefficients = AdafactorKernels::Coefficients;
constexpr int64_t kPartials = kNormPartialBlocks;
constexpr int64_t kRms = kAdafactorRms;  // then lr_t, the clip divisor, row means

// u = g*g + eps1, unfused as on the CPU.
__device__ __forceinline__ float squared_plus(float g, float eps1) {
  return __fadd_rn(__fmul_rn(g, g), eps1);
}

// row[r] = beta2t row[r] + (1 - beta2t) mean_j u: one warp per row of [rows_total, cols], the
// lanes' sums added in a fixed tree (the CPU adds in order: a few ulps apart).
template <typename G>
__global__ void adafactor_rows_kernel(const G* grad, float* row, int64_t rows_total, int64_t cols,
                                      AdafactorCoefficients c) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows_total;
       r += warps) {
    const G* g = grad + r * cols;
    float sum = 0.0f;
    for (int64_t j = lane; j < cols; j += 32) {
      sum = __fadd_rn(sum, squared_plus(to_f32(g[j]), c.eps1));
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      const float mean = __fdiv_rn(sum, static_cast<float>(cols));
      row[r] = __fmaf_rn(mean, c.one_minus_beta2t, __fmul_rn(row[r], c.beta2t));
    }
  }
}

// col[b, j] likewise over the rows, in the CPU's order; col_factor = 1 / sqrt(col).
template <typename G>
__global__ void adafactor_cols_kernel(const G* grad, float* col, float* col_factor, int64_t batch,
                                      int64_t rows, int64_t cols, AdafactorCoefficients c) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < batch * cols;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / cols, j = k % cols;
    const G* g = grad + b * rows * cols + j;
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      sum = __fadd_rn(sum, squared_plus(to_f32(g[r * cols]), c.eps1));
    }
    const float mean = __fdiv_rn(sum, static_cast<float>(rows));
    const float updated = __fmaf_rn(mean, c.one_minus_beta2t, __fmul_rn(col[k], c.beta2t));
    col[k] = updated;
    col_factor[k] = __fdiv_rn(1.0f, __fsqrt_rn(updated));
  }
}

// The mean of each matrix's row statistics, into scalars[kRms + 3 + b]: one block per matrix.
__global__ void adafactor_row_mean_kernel(const float* row, int64_t rows, double* scalars) {
  const int64_t b = blockIdx.x;
  float sum = 0.0f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum = __fadd_rn(sum, row[b * rows + r]);
  sum = block_sum(sum);
  if (threadIdx.x == 0) scalars[kRms + 3 + b] = __fdiv_rn(sum, static_cast<float>(rows));
}

// The unclipped update of element (r, j) of a factored parameter, whose row statistic is
// row_stat and whose matrix has row mean row_mean.
__device__ __forceinline__ float factored_update(float row_stat, float row_mean, float col_factor,
                                                 float g) {
  const float row_factor = __fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(row_stat, row_mean)));
  return __fmul_rn(__fmul_rn(row_factor, col_factor), g);
}

// Sum of u^2 over the factored update, in double, into kPartials per-block partials (a fixed
// grid; rows are spread over blocks, columns over threads).
template <typename G>
__global__ void __launch_bounds__(kThreads)
    adafactor_factored_sumsq_kernel(const G* grad, const float* row, const float* col_factor,
                                    int64_t batch, int64_t rows, int64_t cols, double* scalars) {
  double acc = 0.0;
  for (int64_t r = blockIdx.x; r < batch * rows; r += gridDim.x) {
    const int64_t b = r / rows;
    const float row_mean = static_cast<float>(scalars[kRms + 3 + b]);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float u = factored_update(row[r], row_mean, col_factor[b * cols + j],
                                      to_f32(grad[r * cols + j]));
      acc += static_cast<double>(u) * u;
    }
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) scalars[kPartials + blockIdx.x] = acc;
}

// Vectors: v = beta2t v + (1 - beta2t) u, then the sum of ((1 / sqrt(v)) g)^2 into partials.
template <typename G>
__global__ void __launch_bounds__(kThreads)
    adafactor_vector_kernel(const G* grad, float* exp_avg_sq, int64_t n, AdafactorCoefficients c,
                            double* scalars) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(grad[i]);
    const float v = __fmaf_rn(squared_plus(g, c.eps1), c.one_minus_beta2t,
                              __fmul_rn(exp_avg_sq[i], c.beta2t));
    exp_avg_sq[i] = v;
    const float u = __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(v)), g);
    acc += static_cast<double>(u) * u;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) scalars[kPartials + blockIdx.x] = acc;
}

// rms_of in optim/adafactor.cpp.
__device__ __forceinline__ float rms_of(double sum_of_squares, int64_t n) {
  return __fdiv_rn(static_cast<float>(sqrt(sum_of_squares)),
                   static_cast<float>(sqrt(static_cast<double>(n))));
}

// One thread: the parameter's RMS, lr_t (as optim/adafactor.cpp computes them on the host for
// the CPU) and the clip divisor max(1, RMS(u) / clip_threshold), from the partials in order.
__global__ void adafactor_finish_kernel(double* scalars, int64_t n, AdafactorCoefficients c) {
  double param_sum = 0.0, update_sum = 0.0;
  for (int64_t k = 0; k < kPartials; ++k) param_sum += scalars[k];
  for (int64_t k = 0; k < kPartials; ++k) update_sum += scalars[kPartials + k];
  const float rms = rms_of(param_sum, n);
  double lr = c.rho;
  if (c.scale_parameter) {
    lr = rms > c.eps2 ? static_cast<double>(__fmul_rn(rms, static_cast<float>(c.rho)))
                      : c.eps2 * c.rho;
  }
  const float ratio = __fdiv_rn(rms_of(update_sum, n), c.clip_threshold);
  scalars[kRms] = rms;
  scalars[kRms + 1] = lr;
  scalars[kRms + 2] = 1.0f < ratio ? ratio : 1.0f;  // std::max(1.0f, ratio)
}

// apply_update in optim/adafactor.cpp, given u before clipping.
template <typename P>
__device__ __forceinline__ void adafactor_apply(P* param, float* exp_avg, int64_t i, float u,
                                                const double* scalars,
                                                const AdafactorCoefficients& c) {
  const double lr = scalars[kRms + 1];
  const float divisor = static_cast<float>(scalars[kRms + 2]);
  u = __fmul_rn(__fdiv_rn(u, divisor), static_cast<float>(lr));
  if (c.first_moment) {
    u = __fmaf_rn(u, c.one_minus_beta1, __fmul_rn(exp_avg[i], c.beta1));
    exp_avg[i] = u;
  }
  float p = to_f32(param[i]);
  if (c.weight_decay != 0.0) p = __fmaf_rn(p, static_cast<float>(-c.weight_decay * lr), p);
  param[i] = from_f32<P>(__fsub_rn(p, u));
}

template <typename P, typename G>
__global__ void adafactor_factored_apply_kernel(P* param, const G* grad, float* exp_avg,
                                                const float* row, const float* col_factor,
                                                int64_t batch, int64_t rows, int64_t cols,
                                                const double* scalars, AdafactorCoefficients c) {
  for (int64_t r = blockIdx.x; r < batch * rows; r += gridDim.x) {
    const int64_t b = r / rows;
    const float row_mean = static_cast<float>(scalars[kRms + 3 + b]);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const int64_t i = r * cols + j;
      const float u = factored_update(row[r], row_mean, col_factor[b * cols + j], to_f32(grad[i]));
      adafactor_apply(param, exp_avg, i, u, scalars, c);
    }
  }
}

template <typename P, typename G>
__global__ void adafactor_vector_apply_kernel(P* param, const G* grad, float* exp_avg,
                                              const float* exp_avg_sq, int64_t n,
                                              const double* scalars, AdafactorCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(exp_avg_sq[i])), to_f32(grad[i]));
    adafactor_apply(param, exp_avg, i, u, scalars, c);
  }
}

void adafactor_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                      const Tensor& exp_avg_sq, const Tensor& row, const Tensor& col,
                      const Tensor& col_factor, int64_t batch, int64_t rows, int64_t cols,
                      const Tensor& scalars, const AdafactorCoefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  const cudaStream_t stream = current_stream();
  auto* s = static_cast<double*>(scalars.data_ptr());
  float* m = exp_avg.defined() ? exp_avg.data<float>() : nullptr;
  const bool factored = row.defined();
  const int partial_grid = static_cast<int>(kPartials);
  HEADROOM_CUDA_DISPATCH_FLOAT(param.dtype(), P, {
    // The parameter's sum of squares, before it changes: partials 0 .. kPartials - 1.
    launch_sum_of_squares(static_cast<const P*>(param.data_ptr()), n, s, stream);
    HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), G, {
      const G* g = static_cast<const G*>(grad.data_ptr());
      if (factored) {
        adafactor_rows_kernel<G><<<blocks_for(batch * rows * 32), kThreads, 0, stream>>>(
            g, row.data<float>(), batch * rows, cols, c);
        adafactor_cols_kernel<G><<<blocks_for(batch * cols), kThreads, 0, stream>>>(
            g, col.data<float>(), col_factor.data<float>(), batch, rows, cols, c);
        adafactor_row_mean_kernel<<<static_cast<unsigned>(batch), kThreads, 0, stream>>>(
            row.data<float>(), rows, s);
        adafactor_factored_sumsq_kernel<G><<<partial_grid, kThreads, 0, stream>>>(
            g, row.data<float>(), col_factor.data<float>(), batch, rows, cols, s);
      } else {
        adafactor_vector_kernel<G><<<partial_grid, kThreads, 0, stream>>>(
            g, exp_avg_sq.data<float>(), n, c, s);
      }
      adafactor_finish_kernel<<<1, 1, 0, stream>>>(s, n, c);
      if (factored) {
        adafactor_factored_apply_kernel<P, G><<<blocks_for(batch * rows, 1), kThreads, 0, stream>>>(
            static_cast<P*>(param.data_ptr()), g, m, row.data<float>(), col_factor.data<float>(),
            batch, rows, cols, s, c);
      } else {
        adafactor_vector_apply_kernel<P, G><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<P*>(param.data_ptr()), g, m, exp_avg_sq.data<float>(), n, s, c);
      }
    });
  });
  check_launch();
}

// ---- LOMO (Lomo.fuse_update)

template <typename P, typename G>
__global__ void lomo_kernel(P* param, const G* grad, const float* clip_factor, int64_t n,
                            LomoKernels::Coefficients c) {
  const float coef = clip_factor != nullptr ? clip_factor[1] : 1.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float g = to_f32(grad[i]);
    if (c.clip_value) {  // std::min(std::max(g, -v), v): NaN passes
      g = g < -c.clip_grad_value ? -c.clip_grad_value : g;
      g = c.clip_grad_value < g ? c.clip_grad_value : g;
    }
    if (clip_factor != nullptr) g = __fmul_rn(g, coef);
    float p = to_f32(param[i]);
    if (c.decay) p = __fmul_rn(p, c.decay_factor);
    param[i] = from_f32<P>(__fsub_rn(p, __fmul_rn(g, c.lr)));
  }
}

void lomo_update(const Tensor& param, const Tensor& grad, const Tensor& clip_factor,
                 const LomoKernels::Coefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  const float* factor = clip_factor.defined() ? clip_factor.data<float>() : nullptr;
  HEADROOM_CUDA_DISPATCH_FLOAT(param.dtype(), P, HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), G,
      lomo_kernel<P, G><<<blocks_for(n), kThreads, 0, current_stream()>>>(
          static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()), factor, n,
          c)));
  check_launch();
}

}  // namespace

void fill_adamw_kernels(AdamWKernels& kernels) {
  kernels.update = adamw_update;
}

void fill_adamw_8bit_kernels(AdamW8bitKernels& kernels) {
  kernels.update_32bit = bnb_adam32_update;
  kernels.update_8bit = bnb_adam8bit_update;
}

void fill_lion_kernels(LionKernels& kernels) {
  kernels.update = lion_update;
}

void fill_sgd_kernels(SgdKernels& kernels) {
  kernels.update = sgd_update;
}

void fill_adafactor_kernels(AdafactorKernels& kernels) {
  kernels.update = adafactor_update;
}

void fill_lomo_kernels(LomoKernels& kernels) {
  kernels.update = lomo_update;
}

}  // namespace headroom::cuda
