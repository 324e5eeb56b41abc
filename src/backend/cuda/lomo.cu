// LOMO's fused update on the GPU (Lomo.fuse_update), the lomo table's entry
// (backend/lomo_kernels.h; the CPU's is backend/cpu/lomo.cpp): parameters in their dtype, rounded
// to nearest once, the clip factor read on the device. Each kernel does the CPU kernel's float
// operations in its order, with the _rn intrinsics so that nvcc fuses nothing the CPU does not (and
// fmaf where it does), so results match the CPU reference to the bit; one launch per parameter, no
// host reads.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/backend_parts.h"

namespace headroom::cuda {
namespace {

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
  const float* factor = clip_factor.defined() ? device_data<float>(clip_factor) : nullptr;
  HEADROOM_CUDA_DISPATCH_FLOAT(
      param.dtype(), P,
      HEADROOM_CUDA_DISPATCH_FLOAT(grad.dtype(), G,
                                   lomo_kernel<P, G>
                                   <<<blocks_for(n), kThreads, 0, current_stream()>>>(
                                       static_cast<P*>(param.data_ptr()),
                                       static_cast<const G*>(grad.data_ptr()), factor, n, c)));
  check_launch();
}

}  // namespace

void fill_lomo_kernels(LomoKernels& kernels) { kernels.update = lomo_update; }

}  // namespace headroom::cuda
