// bitsandbytes' 32-bit and 8-bit blockwise Adam on the GPU, the adamw_8bit table's entries
// (backend/adamw_8bit_kernels.h; the CPU's are backend/cpu/adamw_8bit.cpp), in the order of Note
// [bitsandbytes AdamW order of operations]. Each kernel does the CPU kernel's float operations in
// its order, with the _rn intrinsics so that nvcc fuses nothing the CPU does not (and fmaf where it
// does), so results match the CPU reference to the bit; one launch per parameter, no host reads.
// Parameters are f32, bf16 or f16, rounded where bitsandbytes rounds them (Note [bitsandbytes
// 16-bit parameters] in backend/cpu/adamw_8bit.cpp): after the Adam step and after the decay.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/blockwise_quant.h"
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/bnb_dynamic_maps.cuh"
#include "backend/cuda/cuda_launch.h"

namespace headroom::cuda {
namespace {

using BnbAdamCoefficients = BnbAdamCoefficients;

// The parameter after the Adam step `step` and the decay, rounded into P after each.
template <typename P>
__device__ __forceinline__ P bnb_adam_param(P param, float step, const BnbAdamCoefficients& c) {
  const float stepped = to_f32(from_f32<P>(__fadd_rn(to_f32(param), __fmul_rn(c.step_size, step))));
  return from_f32<P>(__fmul_rn(stepped, c.decay));
}

template <typename P, typename G>
__global__ void bnb_adam32_kernel(P* param, const G* grad, float* exp_avg, float* exp_avg_sq,
                                  int64_t n, BnbAdamCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(grad[i]);
    const float m = __fadd_rn(__fmul_rn(exp_avg[i], c.beta1), __fmul_rn(c.one_minus_beta1, g));
    const float v =
        __fadd_rn(__fmul_rn(exp_avg_sq[i], c.beta2), __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] =
        bnb_adam_param(param[i], __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), c.eps_correction2)), c);
  }
}

void bnb_adam32_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                       const Tensor& state2, const BnbAdamCoefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(
      param.dtype(), P,
      HEADROOM_CUDA_DISPATCH_FLOAT(
          grad.dtype(), G,
          bnb_adam32_kernel<P, G><<<blocks_for(n), kThreads, 0, current_stream()>>>(
              static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()),
              device_data<float>(state1), device_data<float>(state2), n, c)));
  check_launch();
}

// One block per state block of 256 (bitsandbytes' kOptimizerStatic8bit2StateBlockwise with one
// element per thread): lanes past the end load g = 0 and codes 128 / 0, as the CPU kernel models.
constexpr int kQuantBlock = static_cast<int>(cpu::kAdam8bitBlockSize);
static_assert(kQuantBlock == 256, "one thread per element of a state block");

template <typename P, typename G>
__global__ void __launch_bounds__(kQuantBlock)
    bnb_adam8bit_kernel(P* param, const G* grad, uint8_t* state1, uint8_t* state2, float* absmax1,
                        float* absmax2, int64_t n, BnbAdamCoefficients c, DynamicMaps maps) {
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
    param[i] =
        bnb_adam_param(param[i], __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), c.eps_correction2)), c);
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
  HEADROOM_CUDA_DISPATCH_FLOAT(
      param.dtype(), P,
      HEADROOM_CUDA_DISPATCH_FLOAT(
          grad.dtype(), G,
          bnb_adam8bit_kernel<P, G>
          <<<static_cast<unsigned>(blocks), kQuantBlock, 0, current_stream()>>>(
              static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()),
              device_data<uint8_t>(state1), device_data<uint8_t>(state2),
              device_data<float>(absmax1), device_data<float>(absmax2), n, c, dynamic_maps())));
  check_launch();
}

}  // namespace

void fill_adamw_8bit_kernels(AdamW8bitKernels& kernels) {
  kernels.update_32bit = bnb_adam32_update;
  kernels.update_8bit = bnb_adam8bit_update;
}

}  // namespace headroom::cuda
