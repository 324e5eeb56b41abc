// The FP8 family on CUDA (backend/fp8_kernels.h), with core/fp8_scaling.h's formulas, so the bytes
// equal the CPU kernels' (tests/cuda/test_cuda_fp8.cpp compares them). Per-tensor amaxes are
// reduced as the bits of |x| with atomicMax (for non-negative floats the bit order is the value
// order, and a NaN's bits exceed inf's, so NaN wins as on the CPU); a blockwise quantization runs
// one CUDA block per scale block.
#include <cstdint>

#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/reduce.cuh"
#include "backend/fp8_kernels.h"

namespace headroom::cuda {
namespace {

constexpr uint32_t kCanonicalNan = 0x7FC00000u;

struct MaxOrNan {
  __device__ float operator()(float a, float b) const {
    return a != a || b != b ? __int_as_float(kCanonicalNan) : fmaxf(a, b);
  }
};

// Overflow and underflow counts of one thread, added to the tensor's at the end.
struct ThreadCounts {
  unsigned long long overflow = 0, underflow = 0;
  __device__ uint8_t add(const Fp8Value& v) {
    overflow += v.overflow;
    underflow += v.underflow;
    return v.bits;
  }
  __device__ void flush(unsigned long long* counts) const {
    if (!counts) return;
    if (overflow) atomicAdd(counts, overflow);
    if (underflow) atomicAdd(counts + 1, underflow);
  }
};

// amax_bits = max(amax_bits, bits of |x|) over x.
template <typename T>
__global__ void amax_kernel(const T* x, int64_t n, unsigned* amax_bits) {
  __shared__ float scratch[32];
  float m = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    m = MaxOrNan{}(m, fabsf(to_f32(x[i])));
  }
  m = block_reduce(m, MaxOrNan{}, scratch);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

// Current scaling: amax (canonical NaN) and the scale from it.
__global__ void current_scale_kernel(float* amax, float* scale, float fp8_max) {
  if (*amax != *amax) *amax = __int_as_float(kCanonicalNan);
  *scale = scale_from_amax(*amax, fp8_max, false);
}

template <typename T>
__global__ void quantize_tensorwise_kernel(const T* x, int64_t n, const float* scale, bool e5m2,
                                           float fp8_max, uint8_t* q, float* scale_inv,
                                           unsigned long long* counts) {
  const float factor = *scale;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / factor;
  ThreadCounts c;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    q[i] = c.add(fp8_quantize_value(to_f32(x[i]), factor, e5m2, fp8_max));
  }
  c.flush(counts);
}

template <typename T>
__global__ void quantize_blockwise_kernel(const T* x, int64_t rows, int64_t cols,
                                          Fp8BlockShape block, int64_t bcols, bool e5m2,
                                          float fp8_max, uint8_t* q, void* scales,
                                          unsigned long long* counts) {
  __shared__ float scratch[32];
  const int64_t b = blockIdx.x;
  const int64_t r0 = (b / bcols) * block.block_rows, c0 = (b % bcols) * block.block_cols;
  const int64_t height = min(rows, r0 + block.block_rows) - r0;
  const int64_t width = min(cols, c0 + block.block_cols) - c0;
  const int64_t size = height * width;
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
    m = MaxOrNan{}(m, fabsf(to_f32(x[(r0 + i / width) * cols + c0 + i % width])));
  }
  const float amax = block_reduce(m, MaxOrNan{}, scratch);
  float factor;
  if (block.e8m0) {
    const uint8_t e = mxfp8_block_exponent(amax, fp8_max);
    if (threadIdx.x == 0) static_cast<uint8_t*>(scales)[b] = e;
    factor = mxfp8_quantize_factor(e);
  } else {
    factor = scale_from_amax(amax, fp8_max, true);
    if (threadIdx.x == 0) static_cast<float*>(scales)[b] = 1.0f / factor;
  }
  ThreadCounts c;
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
    const int64_t at = (r0 + i / width) * cols + c0 + i % width;
    q[at] = c.add(fp8_quantize_value(to_f32(x[at]), factor, e5m2, fp8_max));
  }
  c.flush(counts);
}

template <typename T>
__global__ void dequantize_kernel(const uint8_t* q, int64_t rows, int64_t cols, bool e5m2,
                                  const void* scales, Fp8BlockShape block, int64_t bcols, T* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float s;
    if (block.block_rows == 0) {
      s = static_cast<const float*>(scales)[0];
    } else {
      const int64_t b = (i / cols / block.block_rows) * bcols + (i % cols) / block.block_cols;
      s = block.e8m0 ? e8m0_value(static_cast<const uint8_t*>(scales)[b])
                     : static_cast<const float*>(scales)[b];
    }
    out[i] = from_f32<T>(fp8_bits_value(q[i], e5m2) * s);
  }
}

__global__ void delayed_update_kernel(float* history, int64_t slots, int64_t length,
                                      const float* scaled_max, AmaxComputeAlgo algo, float* scale,
                                      float* scale_inv) {
  for (int64_t s = 0; s < slots; ++s) {
    delayed_scaling_update(history + s * length, length, algo, scaled_max[s], scale + s,
                           scale_inv + s);
  }
}

int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>(blocks_for(n), 4096)); }

bool e5m2_of(const Tensor& q) { return q.dtype() == DType::f8_e5m2; }
float max_of(const Tensor& q) { return e5m2_of(q) ? kFp8E5M2Max : kFp8E4M3Max; }

unsigned long long* counts_ptr(const Tensor& counts) {
  return counts.defined() ? static_cast<unsigned long long*>(counts.data_ptr()) : nullptr;
}

void quantize_tensorwise(const Tensor& x, const Tensor& scale, bool scale_from_amax_of_x,
                         const Tensor& q, const Tensor& scale_inv, const Tensor& amax,
                         const Tensor& counts) {
  DeviceGuard guard(x.device().index);
  const cudaStream_t stream = current_stream();
  const int64_t n = x.numel();
  auto* amax_p = static_cast<float*>(amax.data_ptr());
  if (scale_from_amax_of_x) HEADROOM_CUDA_CHECK(cudaMemsetAsync(amax_p, 0, sizeof(float), stream));
  if (n > 0) {
    HEADROOM_CUDA_DISPATCH_FLOAT(
        x.dtype(), T,
        amax_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x.data_ptr()), n,
                                                             reinterpret_cast<unsigned*>(amax_p)));
    check_launch();
  }
  if (scale_from_amax_of_x) {
    current_scale_kernel<<<1, 1, 0, stream>>>(amax_p, static_cast<float*>(scale.data_ptr()),
                                              max_of(q));
    check_launch();
  }
  HEADROOM_CUDA_DISPATCH_FLOAT(
      x.dtype(), T,
      quantize_tensorwise_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), n, static_cast<const float*>(scale.data_ptr()),
          e5m2_of(q), max_of(q), static_cast<uint8_t*>(q.data_ptr()),
          static_cast<float*>(scale_inv.data_ptr()), counts_ptr(counts)));
  check_launch();
}

void quantize_blockwise(const Tensor& x, Fp8BlockShape block, const Tensor& q, const Tensor& scales,
                        const Tensor& counts) {
  DeviceGuard guard(x.device().index);
  const int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  const int64_t brows = (rows + block.block_rows - 1) / block.block_rows;
  const int64_t bcols = (cols + block.block_cols - 1) / block.block_cols;
  if (brows * bcols == 0) return;
  HEADROOM_CUDA_DISPATCH_FLOAT(
      x.dtype(), T,
      quantize_blockwise_kernel<T>
      <<<static_cast<unsigned>(brows * bcols), kThreads, 0, current_stream()>>>(
          static_cast<const T*>(x.data_ptr()), rows, cols, block, bcols, e5m2_of(q), max_of(q),
          static_cast<uint8_t*>(q.data_ptr()), scales.data_ptr(), counts_ptr(counts)));
  check_launch();
}

void dequantize(const Tensor& q, const Tensor& scales, Fp8BlockShape block, const Tensor& out) {
  DeviceGuard guard(q.device().index);
  const int64_t cols = q.size(-1), rows = cols == 0 ? 0 : q.numel() / cols;
  const int64_t bcols =
      block.block_rows == 0 ? 1 : (cols + block.block_cols - 1) / block.block_cols;
  if (rows * cols == 0) return;
  HEADROOM_CUDA_DISPATCH_FLOAT(
      out.dtype(), T,
      dequantize_kernel<T><<<grid_for(rows * cols), kThreads, 0, current_stream()>>>(
          static_cast<const uint8_t*>(q.data_ptr()), rows, cols, e5m2_of(q), scales.data_ptr(),
          block, bcols, static_cast<T*>(out.data_ptr())));
  check_launch();
}

void delayed_update(const Tensor& history, const Tensor& scaled_max, AmaxComputeAlgo algo,
                    const Tensor& scale, const Tensor& scale_inv) {
  DeviceGuard guard(history.device().index);
  // A handful of slots of at most a few thousand values: one thread, the CPU's loop.
  delayed_update_kernel<<<1, 1, 0, current_stream()>>>(
      static_cast<float*>(history.data_ptr()), history.size(0), history.size(1),
      static_cast<const float*>(scaled_max.data_ptr()), algo, static_cast<float*>(scale.data_ptr()),
      static_cast<float*>(scale_inv.data_ptr()));
  check_launch();
}

}  // namespace

void fill_fp8_kernels(Fp8Kernels& kernels) {
  kernels.quantize_tensorwise = quantize_tensorwise;
  kernels.quantize_blockwise = quantize_blockwise;
  kernels.dequantize = dequantize;
  kernels.delayed_scaling_update = delayed_update;
}

}  // namespace headroom::cuda
