// AdamW on the GPU, the adamw table's entry (backend/adamw_kernels.h; the CPU's is
// backend/cpu/adamw.cpp): every mix of dtypes of backend/cpu/adamw.h, Kahan compensation,
// stochastic rounding. Each kernel does the CPU kernel's float operations in its order, with the
// _rn intrinsics so that nvcc fuses nothing the CPU does not (and fmaf where it does), so results
// match the CPU reference to the bit; one launch per list of parameters, no host reads.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cpu/adamw.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/tensor_list.cuh"
#include "core/float_formats.h"
#include "core/philox.h"

namespace headroom::cuda {
namespace {

using AdamWCoefficients = AdamWCoefficients;

__device__ __forceinline__ float load_f32(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::bf16:
      return to_f32(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f16:
      return to_f32(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
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

// One parameter of a list call and its tensors.
struct AdamWTensor {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  __nv_bfloat16* compensation;  // null without Kahan summation
  PhiloxState rng;
  int64_t n;
  DType grad_dtype;
};

// A list call's parameters (Note [Tensor lists] in backend/kernel_table.h), in the launch's
// parameters.
struct AdamWArgs {
  AdamWTensor tensors[kTensorListCapacity];
  ListBlocks blocks;
  AdamWCoefficients c;
};
static_assert(sizeof(AdamWArgs) + 64 <= kMaxKernelParameterBytes);

// The fp32 update of element i: cpu::adamw_update's FMA variant when kFused (all fp32, as
// cpu::adamw_update runs on a CPU with FMA), else the unfused order of cpu::adamw_update_mixed.
// Stores m and v; returns the updated parameter in fp32 and the old one in *old.
template <typename P, typename S, bool kFused>
__device__ __forceinline__ float adamw_element(const AdamWTensor& a, const AdamWCoefficients& c,
                                               int64_t i, float* old) {
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
__device__ __forceinline__ void store_param(const AdamWTensor& a, int64_t i, float updated,
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

// Block b updates kListBlockElements elements of the parameter it covers (tensor_list.cuh), with
// the FMA order where the CPU takes it: all-fp32 tensors (backend/cpu/adamw.cpp decides so per
// parameter, as here).
template <typename P, typename S>
__global__ void adamw_kernel(const AdamWArgs a) {
  const ListRange range = a.blocks.range_of(a.tensors, blockIdx.x);
  const AdamWTensor& t = a.tensors[range.index];
  const int64_t begin = range.begin, end = range.end;
  constexpr bool kFp32 = std::is_same_v<P, float> && std::is_same_v<S, float>;
  if (kFp32 && t.grad_dtype == DType::f32) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float old;
      const float updated = adamw_element<P, S, true>(t, a.c, i, &old);
      store_param<P>(t, i, updated, old);
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float old;
    const float updated = adamw_element<P, S, false>(t, a.c, i, &old);
    store_param<P>(t, i, updated, old);
  }
}

// Stochastic rounding: a thread updates elements 4q .. 4q + 3 of its block's range, which draw
// the words of block rng.offset + q of the parameter's stream (element i: word i % 4 of block
// i / 4, as on the CPU; kListBlockElements is a multiple of 4).
template <typename P, typename S>
__global__ void adamw_stochastic_kernel(const AdamWArgs a) {
  const ListRange range = a.blocks.range_of(a.tensors, blockIdx.x);
  const AdamWTensor& t = a.tensors[range.index];
  const int64_t begin = range.begin, end = range.end;
  for (int64_t q = begin / 4 + threadIdx.x; 4 * q < end; q += blockDim.x) {
    const Philox4x32Block random =
        philox_block(t.rng.seed, t.rng.offset + static_cast<uint64_t>(q));
    for (int word = 0; word < 4; ++word) {
      const int64_t i = 4 * q + word;
      if (i >= end) break;
      float old;
      const float updated = adamw_element<P, S, false>(t, a.c, i, &old);
      static_cast<P*>(t.param)[i] = stochastic_round<P>(updated, random.word[word]);
    }
  }
}
static_assert(kListBlockElements % 4 == 0);

template <typename P, typename S>
void launch_adamw(const AdamWArgs& a, int32_t blocks, bool stochastic) {
  const cudaStream_t stream = current_stream();
  if constexpr (!std::is_same_v<P, float>) {
    if (stochastic) {
      adamw_stochastic_kernel<P, S><<<blocks, kThreads, 0, stream>>>(a);
      return;
    }
  }
  adamw_kernel<P, S><<<blocks, kThreads, 0, stream>>>(a);
}

void adamw_update(TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
                  TensorList compensations, bool stochastic, std::span<const PhiloxState> rngs,
                  const AdamWCoefficients& c) {
  if (params.empty()) return;
  HEADROOM_CHECK(params.size() <= kTensorListCapacity && grads.size() == params.size() &&
                     exp_avgs.size() == params.size() && exp_avg_sqs.size() == params.size() &&
                     (compensations.empty() || compensations.size() == params.size()) &&
                     (!stochastic || rngs.size() == params.size()),
                 "cuda adamw update: lists of ", params.size(), " parameters (at most ",
                 kTensorListCapacity, "), ", grads.size(), " gradients, ", exp_avgs.size(), " and ",
                 exp_avg_sqs.size(), " states, ", compensations.size(), " compensations, ",
                 rngs.size(), " generators");
  const DType param_dtype = params.front().dtype();
  const DType state = exp_avgs.front().dtype();
  if (state != DType::f32 && state != DType::bf16) {
    check_kernel_dtype("adamw_update", "exp_avg", DType::u8);  // throws, naming the argument
  }
  AdamWArgs a;
  a.c = c;
  for (size_t i = 0; i < params.size(); ++i) {
    check_kernel_dtype("adamw_update", "grad", grads[i].dtype());
    HEADROOM_CHECK(params[i].dtype() == param_dtype && exp_avgs[i].dtype() == state &&
                       exp_avg_sqs[i].dtype() == state,
                   "cuda adamw update: one list holds ", dtype_name(param_dtype),
                   " parameters and ", dtype_name(state), " states, not ",
                   dtype_name(params[i].dtype()), " and ", dtype_name(exp_avgs[i].dtype()));
    a.tensors[i] =
        AdamWTensor{.param = params[i].data_ptr(),
                    .grad = grads[i].data_ptr(),
                    .exp_avg = exp_avgs[i].data_ptr(),
                    .exp_avg_sq = exp_avg_sqs[i].data_ptr(),
                    .compensation = compensations.empty()
                                        ? nullptr
                                        : static_cast<__nv_bfloat16*>(compensations[i].data_ptr()),
                    .rng = stochastic ? rngs[i] : PhiloxState{},
                    .n = params[i].numel(),
                    .grad_dtype = grads[i].dtype()};
  }
  const int32_t blocks =
      a.blocks.plan(static_cast<int32_t>(params.size()), [&](int32_t i) { return a.tensors[i].n; });
  if (blocks == 0) return;
  DeviceGuard guard(params.front().device().index);
  const bool round_stochastically = stochastic && compensations.empty();
  HEADROOM_CUDA_DISPATCH_FLOAT(param_dtype, P, {
    if (state == DType::f32) {
      launch_adamw<P, float>(a, blocks, round_stochastically);
    } else {
      launch_adamw<P, __nv_bfloat16>(a, blocks, round_stochastically);
    }
  });
  check_launch();
}

}  // namespace

void fill_adamw_kernels(AdamWKernels& kernels) { kernels.update = adamw_update; }

}  // namespace headroom::cuda
