// AdamW on the GPU, the adamw table's entry (backend/adamw_kernels.h; the CPU's is
// backend/cpu/adamw.cpp): every mix of dtypes of backend/cpu/adamw.h, Kahan compensation,
// stochastic rounding. Each kernel does the CPU kernel's float operations in its order, with the
// _rn intrinsics so that nvcc fuses nothing the CPU does not (and fmaf where it does), so results
// match the CPU reference to the bit; one launch per parameter, no host reads.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cpu/adamw.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/backend_parts.h"
#include "core/float_formats.h"
#include "core/philox.h"

namespace headroom::cuda {
namespace {

using AdamWCoefficients = cpu::AdamWCoefficients;

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
  // The CPU takes its FMA kernel only when everything is fp32 (backend/cpu/adamw.cpp).
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

}  // namespace

void fill_adamw_kernels(AdamWKernels& kernels) {
  kernels.update = adamw_update;
}

}  // namespace headroom::cuda
