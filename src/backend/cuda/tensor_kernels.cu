// CUDA kernels behind the Tensor class: fill, strided copy with dtype conversion, arange, Philox
// draws and host transfers: the cuda DeviceKernels (registered by backend/cuda/backend.cpp).
// Conversions and random numbers use the same host/device functions as the CPU kernels
// (core/element_io.h, core/philox.h), so results are bit-identical to the CPU reference. Kernels
// run on the thread's current stream, in order with the op kernels; transfers to and from the CPU
// wait for that stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "core/device_kernels.h"
#include "core/element_io.h"
#include "core/philox.h"
#include "core/strided_dims.h"
#include "core/tensor.h"

namespace headroom::cuda {
namespace {

constexpr int kMaxDims = 16;

// coalesce_dims' result in a form a kernel can take by value.
struct Layout {
  int ndim = 0;
  int64_t size[kMaxDims];
  int64_t dst_stride[kMaxDims];
  int64_t src_stride[kMaxDims];
};

Layout make_layout(const Tensor& dst, const Tensor* src) {
  const StridedDims dims = coalesce_dims(dst, src);
  if (dims.sizes.size() > static_cast<size_t>(kMaxDims)) {
    throw NotImplementedError(str_cat("cuda copy: ", dims.sizes.size(),
                                      " non-mergeable dimensions exceed the kernel's limit of ",
                                      kMaxDims));
  }
  Layout layout;
  layout.ndim = static_cast<int>(dims.sizes.size());
  for (int i = 0; i < layout.ndim; ++i) {
    layout.size[i] = dims.sizes[i];
    layout.dst_stride[i] = dims.dst_strides[i];
    layout.src_stride[i] = dims.src_strides[i];
  }
  return layout;
}

__device__ inline void offsets(const Layout& l, int64_t linear, int64_t* dst, int64_t* src) {
  int64_t d = 0, s = 0;
  for (int i = l.ndim - 1; i >= 0; --i) {
    const int64_t coord = linear % l.size[i];
    linear /= l.size[i];
    d += coord * l.dst_stride[i];
    s += coord * l.src_stride[i];
  }
  *dst = d;
  *src = s;
}

__global__ void copy_kernel(char* dst, DType dst_dtype, int dst_size, const char* src,
                            DType src_dtype, int src_size, Layout layout, int64_t n,
                            Overflow overflow) {
  const bool same = dst_dtype == src_dtype;
  const bool integral = !is_floating_dtype(dst_dtype) && !is_floating_dtype(src_dtype);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t d, s;
    offsets(layout, i, &d, &s);
    char* out = dst + d * dst_size;
    const char* in = src + s * src_size;
    if (same) {
      for (int b = 0; b < dst_size; ++b) out[b] = in[b];
    } else if (integral) {
      store_from_i64(out, dst_dtype, load_as_i64(in, src_dtype));
    } else {
      store_from_f32(out, dst_dtype, load_as_f32(in, src_dtype), overflow);
    }
  }
}

__global__ void accumulate_kernel(char* dst, DType dst_dtype, int dst_size, const char* src,
                                  DType src_dtype, int src_size, Layout layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t d, s;
    offsets(layout, i, &d, &s);
    char* out = dst + d * dst_size;
    const float sum = load_as_f32(out, dst_dtype) + load_as_f32(src + s * src_size, src_dtype);
    store_from_f32(out, dst_dtype, sum, Overflow::ieee);
  }
}

__global__ void fill_kernel(char* dst, int size, Layout layout, int64_t n, uint64_t pattern) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t d, unused;
    offsets(layout, i, &d, &unused);
    char* out = dst + d * size;
    for (int b = 0; b < size; ++b) out[b] = static_cast<char>(pattern >> (8 * b));
  }
}

__global__ void arange_kernel(char* dst, DType dtype, int size, int64_t n, double start,
                              double step) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_from_double(dst + i * size, dtype, start + static_cast<double>(i) * step);
  }
}

__global__ void uniform_kernel(char* dst, DType dtype, int size, int64_t n, PhiloxState rng,
                               float low, float high) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_from_f32(dst + i * size, dtype,
                   philox_uniform(rng.seed, rng.offset, static_cast<uint64_t>(i), low, high),
                   Overflow::ieee);
  }
}

__global__ void normal_kernel(char* dst, DType dtype, int size, int64_t n, PhiloxState rng,
                              float mean, float std) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_from_f32(dst + i * size, dtype,
                   philox_normal(rng.seed, rng.offset, static_cast<uint64_t>(i), mean, std),
                   Overflow::ieee);
  }
}

char* base_of(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

void copy(const Tensor& dst, const Tensor& src, Overflow overflow) {
  DeviceGuard guard(dst.device().index);
  const int64_t n = dst.numel();
  copy_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      base_of(dst), dst.dtype(), static_cast<int>(dst.element_size()), base_of(src), src.dtype(),
      static_cast<int>(src.element_size()), make_layout(dst, &src), n, overflow);
  check_launch();
}

void accumulate(const Tensor& dst, const Tensor& src) {
  DeviceGuard guard(dst.device().index);
  const int64_t n = dst.numel();
  accumulate_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      base_of(dst), dst.dtype(), static_cast<int>(dst.element_size()), base_of(src), src.dtype(),
      static_cast<int>(src.element_size()), make_layout(dst, &src), n);
  check_launch();
}

void fill(const Tensor& dst, double value) {
  DeviceGuard guard(dst.device().index);
  alignas(8) unsigned char bytes[8] = {};
  store_from_double(bytes, dst.dtype(), value);
  uint64_t pattern;
  std::memcpy(&pattern, bytes, 8);
  const int64_t n = dst.numel();
  fill_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      base_of(dst), static_cast<int>(dst.element_size()), make_layout(dst, nullptr), n, pattern);
  check_launch();
}

void arange(const Tensor& dst, double start, double step) {
  DeviceGuard guard(dst.device().index);
  const int64_t n = dst.numel();
  arange_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      base_of(dst), dst.dtype(), static_cast<int>(dst.element_size()), n, start, step);
  check_launch();
}

void uniform(const Tensor& dst, PhiloxState rng, double low, double high) {
  DeviceGuard guard(dst.device().index);
  const int64_t n = dst.numel();
  uniform_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      base_of(dst), dst.dtype(), static_cast<int>(dst.element_size()), n, rng,
      static_cast<float>(low), static_cast<float>(high));
  check_launch();
}

void normal(const Tensor& dst, PhiloxState rng, double mean, double std) {
  DeviceGuard guard(dst.device().index);
  const int64_t n = dst.numel();
  normal_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      base_of(dst), dst.dtype(), static_cast<int>(dst.element_size()), n, rng,
      static_cast<float>(mean), static_cast<float>(std));
  check_launch();
}

void copy_from_cpu(const Tensor& dst, const Tensor& cpu_src) {
  DeviceGuard guard(dst.device().index);
  // On the current stream, after the kernels queued there; the host buffer may be reused as soon
  // as this returns.
  HEADROOM_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), cpu_src.data_ptr(), dst.nbytes(),
                                      cudaMemcpyHostToDevice, current_stream()));
  HEADROOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

void copy_to_cpu(const Tensor& cpu_dst, const Tensor& src) {
  DeviceGuard guard(src.device().index);
  HEADROOM_CUDA_CHECK(cudaMemcpyAsync(cpu_dst.data_ptr(), src.data_ptr(), src.nbytes(),
                                      cudaMemcpyDeviceToHost, current_stream()));
  HEADROOM_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

void copy_from_cpu_async(const Tensor& dst, const Tensor& cpu_src) {
  DeviceGuard guard(dst.device().index);
  HEADROOM_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), cpu_src.data_ptr(), dst.nbytes(),
                                      cudaMemcpyHostToDevice, current_stream()));
}

void copy_to_cpu_async(const Tensor& cpu_dst, const Tensor& src) {
  DeviceGuard guard(src.device().index);
  HEADROOM_CUDA_CHECK(cudaMemcpyAsync(cpu_dst.data_ptr(), src.data_ptr(), src.nbytes(),
                                      cudaMemcpyDeviceToHost, current_stream()));
}

void synchronize(int index) {
  DeviceGuard guard(index);
  HEADROOM_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

const DeviceKernels& tensor_kernels() {
  static const DeviceKernels kernels = [] {
    DeviceKernels k;
    k.fill = fill;
    k.copy = copy;
    k.accumulate = accumulate;
    k.arange = arange;
    k.uniform = uniform;
    k.normal = normal;
    k.copy_from_cpu = copy_from_cpu;
    k.copy_to_cpu = copy_to_cpu;
    k.copy_from_cpu_async = copy_from_cpu_async;
    k.copy_to_cpu_async = copy_to_cpu_async;
    k.synchronize = synchronize;
    k.device_count = device_count;
    // Every entry of the CUDA kernel tables is filled by the kernel files of backend/cuda/
    // (tests/core/test_device_kernels.cpp checks), so the ops run here and device "auto" picks the
    // GPU (Note [Devices that compute the ops] in core/device_kernels.h).
    k.has_op_kernels = true;
    return k;
  }();
  return kernels;
}

}  // namespace headroom::cuda
