// Lion on the GPU (Note [Lion update]), the lion table's entry (backend/lion_kernels.h; the CPU's
// is backend/cpu/lion.cpp): parameters in their dtype, rounded to nearest once. Each kernel does
// the CPU kernel's float operations in its order, with the _rn intrinsics so that nvcc fuses
// nothing the CPU does not (and fmaf where it does), so results match the CPU reference to the bit;
// one launch per parameter, no host reads.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/backend_parts.h"

namespace headroom::cuda {
namespace {

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
  HEADROOM_CUDA_DISPATCH_FLOAT(
      param.dtype(), P,
      HEADROOM_CUDA_DISPATCH_FLOAT(
          grad.dtype(), G,
          lion_kernel<P, G><<<blocks_for(n), kThreads, 0, current_stream()>>>(
              static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()),
              device_data<float>(exp_avg), n, c)));
  check_launch();
}

}  // namespace

void fill_lion_kernels(LionKernels& kernels) { kernels.update = lion_update; }

}  // namespace headroom::cuda
