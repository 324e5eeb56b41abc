// torch's SGD on the GPU, the sgd table's entry (backend/sgd_kernels.h; the CPU's is
// backend/cpu/sgd.cpp): parameters in their dtype, rounded to nearest once. Each kernel does the
// CPU kernel's float operations in its order, with the _rn intrinsics so that nvcc fuses nothing
// the CPU does not (and fmaf where it does), so results match the CPU reference to the bit; one
// launch per parameter, no host reads.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/backend_parts.h"

namespace headroom::cuda {
namespace {

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

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, bool first,
                const SgdKernels::Coefficients& c) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device().index);
  float* buffer = momentum_buffer.defined() ? device_data<float>(momentum_buffer) : nullptr;
  HEADROOM_CUDA_DISPATCH_FLOAT(
      param.dtype(), P,
      HEADROOM_CUDA_DISPATCH_FLOAT(
          grad.dtype(), G,
          sgd_kernel<P, G><<<blocks_for(n), kThreads, 0, current_stream()>>>(
              static_cast<P*>(param.data_ptr()), static_cast<const G*>(grad.data_ptr()), buffer,
              first, n, c)));
  check_launch();
}

}  // namespace

void fill_sgd_kernels(SgdKernels& kernels) { kernels.update = sgd_update; }

}  // namespace headroom::cuda
