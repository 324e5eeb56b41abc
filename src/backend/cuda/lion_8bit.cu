// bitsandbytes' 32-bit and 8-bit blockwise Lion on the GPU, the lion_8bit table's entries
// (backend/lion_8bit_kernels.h; the CPU's are backend/cpu/lion_8bit.cpp), in the order of Note
// [bitsandbytes Lion], parameters rounded where Note [bitsandbytes 16-bit parameters] says. Each
// kernel does the CPU kernel's float operations in its order with the _rn intrinsics (nvcc fuses
// nothing), so results match the CPU reference to the bit; one launch per parameter.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cpu/lion_8bit.h"
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/bnb_dynamic_maps.cuh"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/reduce.cuh"

namespace headroom::cuda {
namespace {

using BnbLionCoefficients = BnbLionCoefficients;

__device__ __forceinline__ float sign_of(float x) {
  return static_cast<float>((0.0f < x) - (x < 0.0f));
}

// The parameter after the decay (when on), rounded into P.
template <typename P>
__device__ __forceinline__ float decayed(P param, const BnbLionCoefficients& c) {
  return c.decays ? to_f32(from_f32<P>(__fmul_rn(to_f32(param), c.decay))) : to_f32(param);
}

template <typename P, typename G>
__global__ void bnb_lion32_kernel(P* param, const G* grad, float* exp_avg, int64_t n,
                                  BnbLionCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(grad[i]);
    const float m = exp_avg[i];
    const float p = decayed(param[i], c);
    const float sign = sign_of(__fadd_rn(__fmul_rn(m, c.beta1), __fmul_rn(c.one_minus_beta1, g)));
    param[i] = from_f32<P>(__fsub_rn(p, __fmul_rn(c.lr, sign)));
    exp_avg[i] = __fadd_rn(__fmul_rn(m, c.beta2), __fmul_rn(c.one_minus_beta2, g));
  }
}

void bnb_lion32_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                       const BnbLionCoefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(
      param.dtype(), P,
      HEADROOM_CUDA_DISPATCH_FLOAT(
          grad.dtype(), G,
          bnb_lion32_kernel<P, G><<<blocks_for(n), kThreads, 0, current_stream()>>>(
              static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()),
              device_data<float>(state1), n, c)));
  check_launch();
}

// One block per state block of 256 (kOptimizerStatic8bit1StateBlockwise, one element per thread):
// lanes past the end load g = 0 and code 128, and their momentum joins the absmax, as the CPU
// kernel models.
constexpr int kQuantBlock = static_cast<int>(cpu::kAdam8bitBlockSize);
static_assert(kQuantBlock == 256, "one thread per element of a state block");

template <typename P, typename G>
__global__ void __launch_bounds__(kQuantBlock)
    bnb_lion8bit_kernel(P* param, const G* grad, uint8_t* state1, float* absmax1, int64_t n,
                        BnbLionCoefficients c, DynamicMaps maps) {
  __shared__ float q1[256];
  __shared__ float scratch[32];
  const int t = threadIdx.x;
  q1[t] = maps.signed_code[t];
  __syncthreads();
  const int64_t block = blockIdx.x;
  const int64_t i = block * kQuantBlock + t;
  const bool valid = i < n;
  const float g = valid ? to_f32(grad[i]) : 0.0f;
  const float old_m = __fmul_rn(q1[valid ? state1[i] : uint8_t{128}], absmax1[block]);
  const float step = __fmul_rn(
      c.lr, sign_of(__fadd_rn(__fmul_rn(old_m, c.beta1), __fmul_rn(c.one_minus_beta1, g))));
  const float m = __fadd_rn(__fmul_rn(old_m, c.beta2), __fmul_rn(c.one_minus_beta2, g));
  // The max does not depend on the order; block_reduce's barriers also keep every thread's read
  // of absmax1[block] before thread 0 writes it.
  const float max = block_reduce(fabsf(m), Max{}, scratch);
  if (t == 0) absmax1[block] = max;
  if (!valid) return;
  const float p = decayed(param[i], c);
  // The step is held in the gradient's type T, as bitsandbytes keeps it (P here: its p and g
  // share T).
  param[i] = from_f32<P>(__fsub_rn(p, to_f32(from_f32<P>(step))));
  uint8_t code = cpu::quantize_nearest(q1, __fdiv_rn(m, max));
  if ((signbit(q1[code]) != 0) != (signbit(m) != 0)) code += m > 0.0f ? 1 : -1;
  state1[i] = code;
}

void bnb_lion8bit_update(const Tensor& param, const Tensor& grad, const Tensor& state1,
                         const Tensor& absmax1, const BnbLionCoefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  if (blocks > 0x7fffffff) throw ValueError("bnb_lion8bit_update: too many state blocks");
  DeviceGuard guard(param.device().index);
  HEADROOM_CUDA_DISPATCH_FLOAT(
      param.dtype(), P,
      HEADROOM_CUDA_DISPATCH_FLOAT(
          grad.dtype(), G,
          bnb_lion8bit_kernel<P, G>
          <<<static_cast<unsigned>(blocks), kQuantBlock, 0, current_stream()>>>(
              static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()),
              device_data<uint8_t>(state1), device_data<float>(absmax1), n, c, dynamic_maps())));
  check_launch();
}

}  // namespace

void fill_lion_8bit_kernels(Lion8bitKernels& kernels) {
  kernels.update_32bit = bnb_lion32_update;
  kernels.update_8bit = bnb_lion8bit_update;
}

}  // namespace headroom::cuda
