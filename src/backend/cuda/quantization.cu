// The `quantization` family on CUDA (backend/quantization_kernels.h): the 4-bit linear's forward
// and input gradient as tiled kernels that dequantize a 32 x 32 weight tile into shared memory
// per step (cpu::quant_4bit_element, the CPU kernel's arithmetic), so no dequantized weight
// exists in global memory. Operands load as fp32, sums run in fp32, results round once. The op's
// workspace is not needed here. tests/cuda/test_cuda_quantization.cpp compares with the CPU.
#include <cstdint>

#include "backend/cpu/linear_4bit.h"
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/quantization_kernels.h"

namespace headroom::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerThread = 4;  // blockDim (32, 8): each thread sums 4 outputs of a column

template <typename T>
__device__ __forceinline__ float weight_value(const cpu::Quant4bitPointers& w, int64_t i) {
  const float v = cpu::quant_4bit_element(w, i);
  return to_f32(from_f32<T>(v));  // rounded to the compute dtype, as the CPU kernel does
}

// y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]); W row-major [out, in].
template <typename T>
__global__ void linear_4bit_forward_kernel(const T* x, cpu::Quant4bitPointers w, const T* bias,
                                           T* y, int64_t rows, int64_t in, int64_t out) {
  __shared__ float xs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t m0 = int64_t{blockIdx.y} * kTile, n0 = int64_t{blockIdx.x} * kTile;
  float acc[kRowsPerThread] = {};
  for (int64_t k0 = 0; k0 < in; k0 += kTile) {
    for (int r = ty; r < kTile; r += blockDim.y) {
      const int64_t m = m0 + r, k = k0 + tx, n = n0 + r;
      xs[r][tx] = m < rows && k < in ? to_f32(x[m * in + k]) : 0.0f;
      ws[r][tx] = n < out && k < in ? weight_value<T>(w, n * in + k) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) {
      const float wv = ws[tx][kk];
      for (int i = 0; i < kRowsPerThread; ++i) acc[i] += xs[ty + i * blockDim.y][kk] * wv;
    }
    __syncthreads();
  }
  const int64_t n = n0 + tx;
  if (n >= out) return;
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t m = m0 + ty + i * blockDim.y;
    if (m < rows) y[m * out + n] = from_f32<T>(acc[i] + (bias ? to_f32(bias[n]) : 0.0f));
  }
}

// gx[m, k] = sum_n gy[m, n] * W[n, k].
template <typename T>
__global__ void linear_4bit_backward_input_kernel(const T* gy, cpu::Quant4bitPointers w, T* gx,
                                                  int64_t rows, int64_t in, int64_t out) {
  __shared__ float gs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t m0 = int64_t{blockIdx.y} * kTile, k0 = int64_t{blockIdx.x} * kTile;
  float acc[kRowsPerThread] = {};
  for (int64_t n0 = 0; n0 < out; n0 += kTile) {
    for (int r = ty; r < kTile; r += blockDim.y) {
      const int64_t m = m0 + r, n = n0 + tx, nw = n0 + r, k = k0 + tx;
      gs[r][tx] = m < rows && n < out ? to_f32(gy[m * out + n]) : 0.0f;
      ws[r][tx] = nw < out && k < in ? weight_value<T>(w, nw * in + k) : 0.0f;
    }
    __syncthreads();
    for (int nn = 0; nn < kTile; ++nn) {
      const float wv = ws[nn][tx];
      for (int i = 0; i < kRowsPerThread; ++i) acc[i] += gs[ty + i * blockDim.y][nn] * wv;
    }
    __syncthreads();
  }
  const int64_t k = k0 + tx;
  if (k >= in) return;
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t m = m0 + ty + i * blockDim.y;
    if (m < rows) gx[m * in + k] = from_f32<T>(acc[i]);
  }
}

dim3 grid_for(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>((cols + kTile - 1) / kTile),
              static_cast<unsigned>((rows + kTile - 1) / kTile));
}

void forward(const Tensor& x, const Quant4bitOperand& w, const Tensor& bias, const Tensor&,
             const Tensor& y) {
  const int64_t in = w.cols, out = w.rows, rows = x.numel() / in;
  DeviceGuard guard(x.device().index);
  const cpu::Quant4bitPointers p = cpu::quant_4bit_pointers(w);
  HEADROOM_CUDA_DISPATCH_FLOAT(
      x.dtype(), T,
      linear_4bit_forward_kernel<T>
      <<<grid_for(rows, out), dim3(kTile, kTile / kRowsPerThread), 0, current_stream()>>>(
          static_cast<const T*>(x.data_ptr()), p,
          bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr,
          static_cast<T*>(y.data_ptr()), rows, in, out));
  check_launch();
}

void backward_input(const Tensor& grad_y, const Quant4bitOperand& w, const Tensor&,
                    const Tensor& grad_x) {
  const int64_t in = w.cols, out = w.rows, rows = grad_y.numel() / out;
  DeviceGuard guard(grad_y.device().index);
  const cpu::Quant4bitPointers p = cpu::quant_4bit_pointers(w);
  HEADROOM_CUDA_DISPATCH_FLOAT(
      grad_y.dtype(), T,
      linear_4bit_backward_input_kernel<T>
      <<<grid_for(rows, in), dim3(kTile, kTile / kRowsPerThread), 0, current_stream()>>>(
          static_cast<const T*>(grad_y.data_ptr()), p, static_cast<T*>(grad_x.data_ptr()), rows, in,
          out));
  check_launch();
}

}  // namespace

void fill_quantization_kernels(QuantizationKernels& kernels) {
  kernels.linear_4bit_forward = forward;
  kernels.linear_4bit_backward_input = backward_input;
}

}  // namespace headroom::cuda
