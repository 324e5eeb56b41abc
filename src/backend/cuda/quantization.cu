// The `quantization` family on CUDA (backend/quantization_kernels.h): the 4-bit codec (quantize
// a weight on the GPU, its double quantization, dequantize), with the CPU's arithmetic
// (backend/cpu/quant_4bit.h, torch_mean.h) so that codes and absmax agree bit for bit; and the
// 4-bit linear's forward and input gradient as tiled kernels that dequantize a 32 x 32 weight tile
// into shared memory per step (cpu::quant_4bit_element, the CPU kernel's arithmetic), so no
// dequantized weight exists in global memory. Operands load as fp32, sums run in fp32, results
// round once. The op's workspace is not needed here. tests/cuda/test_cuda_quantization.cpp compares
// with the CPU.
#include <cstdint>

#include "backend/cpu/blockwise_quant.h"
#include "backend/cpu/linear_4bit.h"
#include "backend/cpu/quant_4bit.h"
#include "backend/cpu/torch_mean.h"
#include "backend/cuda/cuda_check.h"
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

// ---- the 4-bit codec

// A thread per quantization block, each as the CPU's loop body (without flush-to-zero).
template <typename T>
__global__ void quantize_4bit_kernel(const T* weight, int64_t n, int64_t blocksize, int64_t blocks,
                                     cpu::Quant4bitSortedCode sorted, uint8_t* packed,
                                     float* absmax) {
  const auto at = [weight](int64_t i) { return to_f32(weight[i]); };
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    cpu::quantize_4bit_block(sorted, at, n, blocksize, b, packed, absmax);
  }
}

void quantize_4bit(const Tensor& weight, Quant4bitType type, int64_t blocksize,
                   const Tensor& packed, const Tensor& absmax) {
  const int64_t n = weight.numel();
  const int64_t blocks = absmax.numel();
  if (n == 0) return;
  DeviceGuard guard(weight.device().index);
  const cpu::Quant4bitSortedCode sorted = cpu::quant_4bit_sorted_code(type);
  HEADROOM_CUDA_DISPATCH_FLOAT(
      weight.dtype(), T,
      quantize_4bit_kernel<T><<<blocks_for(blocks), kThreads, 0, current_stream()>>>(
          static_cast<const T*>(weight.data_ptr()), n, blocksize, blocks, sorted,
          static_cast<uint8_t*>(packed.data_ptr()), device_data<float>(absmax)));
  check_launch();
}

// The mean in torch's order is one sequential fold: one thread (at load, once per weight).
__global__ void absmax_mean_kernel(const float* absmax, int64_t blocks, float* offset) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *offset = cpu::torch_mean_f32(absmax, blocks);
}

// The signed dynamic map's 255 midpoints, as build_quantize_lut (blockwise_quant.cpp) makes them.
struct NestedMidpoints {
  float v[255];
};

// A thread per nested block: subtract the offset, take the block's max |a|, and give each value
// the code its entry of the CPU's 65536-entry table holds, computed here instead of looked up:
// the number of midpoints below that entry's value.
__global__ void quantize_absmax_nested_kernel(float* absmax, const float* offset, int64_t blocks,
                                              NestedMidpoints midpoints, uint8_t* codes,
                                              float* nested_absmax) {
  const int64_t nested = (blocks + kQuant4bitNestedBlocksize - 1) / kQuant4bitNestedBlocksize;
  const float o = *offset;
  for (int64_t nb = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; nb < nested;
       nb += int64_t{gridDim.x} * blockDim.x) {
    const int64_t begin = nb * kQuant4bitNestedBlocksize;
    const int64_t end = min(blocks, begin + kQuant4bitNestedBlocksize);
    float m = 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      const float a = __fsub_rn(absmax[i], o);
      absmax[i] = a;
      const float v = fabsf(a);
      if (m < v) m = v;
    }
    nested_absmax[nb] = m;
    const float inverse = m == 0.0f ? 0.0f : __fdiv_rn(1.0f, m);
    for (int64_t i = begin; i < end; ++i) {
      if (m == 0.0f) {
        codes[i] = 0;
        continue;
      }
      float scaled = __fmul_rn(absmax[i], inverse);
      scaled = scaled < -1.0f ? -1.0f : (1.0f < scaled ? 1.0f : scaled);
      const auto index =
          static_cast<uint16_t>(fmaf(__fmul_rn(__fadd_rn(scaled, 1.0f), 0.5f), 65535.0f, 0.5f));
      const float value =
          __fadd_rn(-1.0f, __fdiv_rn(__fmul_rn(2.0f, static_cast<float>(index)), 65535.0f));
      int k = 0;
      while (k < 255 && midpoints.v[k] < value) ++k;
      codes[i] = static_cast<uint8_t>(k);
    }
  }
}

void quantize_absmax_nested(const Tensor& absmax, const Tensor& offset, const Tensor& codes,
                            const Tensor& nested_absmax, const Tensor& nested_code) {
  const int64_t blocks = absmax.numel();
  DeviceGuard guard(absmax.device().index);
  static const cpu::QuantizationMap map =
      cpu::create_dynamic_map(/*is_signed=*/true, 7, 8, /*fused_linspace=*/true);
  NestedMidpoints midpoints;
  for (int i = 0; i < 255; ++i) midpoints.v[i] = 0.5f * (map[i] + map[i + 1]);
  HEADROOM_CUDA_CHECK(cudaMemcpyAsync(nested_code.data_ptr(), map.data(), sizeof(float) * 256,
                                      cudaMemcpyHostToDevice, current_stream()));
  absmax_mean_kernel<<<1, 1, 0, current_stream()>>>(device_data<float>(absmax), blocks,
                                                    device_data<float>(offset));
  check_launch();
  const int64_t nested = (blocks + kQuant4bitNestedBlocksize - 1) / kQuant4bitNestedBlocksize;
  quantize_absmax_nested_kernel<<<blocks_for(nested), kThreads, 0, current_stream()>>>(
      device_data<float>(absmax), device_data<float>(offset), blocks, midpoints,
      static_cast<uint8_t*>(codes.data_ptr()), device_data<float>(nested_absmax));
  check_launch();
}

template <typename T>
__global__ void dequantize_4bit_kernel(cpu::Quant4bitPointers w, int64_t n, T* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_f32<T>(cpu::quant_4bit_element(w, i));
  }
}

void dequantize_4bit(const Quant4bitOperand& w, const Tensor& out) {
  const int64_t n = w.rows * w.cols;
  if (n == 0) return;
  DeviceGuard guard(out.device().index);
  const cpu::Quant4bitPointers p = cpu::quant_4bit_pointers(w);
  HEADROOM_CUDA_DISPATCH_FLOAT(
      out.dtype(), T,
      dequantize_4bit_kernel<T>
      <<<blocks_for(n), kThreads, 0, current_stream()>>>(p, n, static_cast<T*>(out.data_ptr())));
  check_launch();
}

}  // namespace

void fill_quantization_kernels(QuantizationKernels& kernels) {
  kernels.linear_4bit_forward = forward;
  kernels.linear_4bit_backward_input = backward_input;
  kernels.quantize_4bit = quantize_4bit;
  kernels.quantize_absmax_nested = quantize_absmax_nested;
  kernels.dequantize_4bit = dequantize_4bit;
}

}  // namespace headroom::cuda
