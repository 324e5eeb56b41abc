// The point-wise CUDA kernels: gelu / silu / swiglu forward and backward, add / sub / mul with
// broadcasting, scale, dropout on the Philox stream and the rotary embedding. Each reads its
// tensors' own dtypes, computes in fp32 with the CPU kernel's formula and constants
// (backend/cpu/activation.cpp, elementwise.cpp, dropout.cpp, rotary.cpp) and rounds once to the
// output's dtype. The CPU's exp and tanh are its own polynomials (backend/cpu/pointwise_simd.h),
// here they are CUDA's expf / tanhf: both are within about two ulps of the exact value, so the
// activations agree with the CPU to a few ulps; add / sub / mul / scale, dropout and (given the
// same table) the rotation are single IEEE operations and agree bit for bit.
#include <algorithm>
#include <array>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/operand.cuh"
#include "backend/device_ops.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/strided_dims.h"

namespace headroom::cuda {
namespace {

// ---- element-wise maps: out_k = fn(in_0, ..., in_{kIn-1}) for every element

template <int kIn, int kOut>
struct MapArgs {
  Operand in[kIn];
  Operand out[kOut];  // an output with null data is not stored
};

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Every operand has dtype T; with V > 1 every address is 16-byte aligned and V = 16 / sizeof(T)
// elements move per load. Elements past the last whole vector are done one at a time.
template <typename T, int V, int kIn, int kOut, typename Fn>
__global__ void map_kernel(MapArgs<kIn, kOut> args, int64_t n, Fn fn) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t vectors = n / V;
  for (int64_t v = first; v < vectors; v += stride) {
    Pack<T, V> in[kIn], out[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) in[k] = reinterpret_cast<const Pack<T, V>*>(args.in[k].data)[v];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float x[kIn], y[kOut];
#pragma unroll
      for (int k = 0; k < kIn; ++k) x[k] = to_f32(in[k].v[e]);
      fn(x, y);
#pragma unroll
      for (int k = 0; k < kOut; ++k) out[k].v[e] = from_f32<T>(y[k]);
    }
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      if (args.out[k].data) reinterpret_cast<Pack<T, V>*>(args.out[k].data)[v] = out[k];
    }
  }
  for (int64_t i = vectors * V + first; i < n; i += stride) {
    float x[kIn], y[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = to_f32(reinterpret_cast<const T*>(args.in[k].data)[i]);
    fn(x, y);
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      if (args.out[k].data) reinterpret_cast<T*>(args.out[k].data)[i] = from_f32<T>(y[k]);
    }
  }
}

// Any mix of dtypes, one element at a time.
template <int kIn, int kOut, typename Fn>
__global__ void map_mixed_kernel(MapArgs<kIn, kOut> args, int64_t n, Fn fn) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float x[kIn], y[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = load(args.in[k], i);
    fn(x, y);
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      if (args.out[k].data) store(args.out[k], i, y[k]);
    }
  }
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// Runs fn over the elements of contiguous tensors of one shape; undefined outputs are skipped.
// An output may be one of the inputs (each element is read before it is written, by one thread).
template <int kIn, int kOut, typename Fn>
void map(const char* op, const std::array<Tensor, kIn>& in, const std::array<Tensor, kOut>& out,
         Fn fn) {
  const int64_t n = in[0].numel();
  if (n == 0) return;
  DeviceGuard guard(in[0].device().index);
  MapArgs<kIn, kOut> args;
  const DType dtype = in[0].dtype();
  bool uniform = true, aligned = true;
  for (int k = 0; k < kIn; ++k) {
    check_kernel_dtype(op, "input", in[k].dtype());
    args.in[k] = operand_of(in[k]);
    uniform = uniform && in[k].dtype() == dtype;
    aligned = aligned && aligned16(in[k]);
  }
  for (int k = 0; k < kOut; ++k) {
    if (!out[k].defined()) continue;
    check_kernel_dtype(op, "output", out[k].dtype());
    args.out[k] = operand_of(out[k]);
    uniform = uniform && out[k].dtype() == dtype;
    aligned = aligned && aligned16(out[k]);
  }
  cudaStream_t stream = current_stream();
  if (!uniform) {
    map_mixed_kernel<<<blocks_for(n), kThreads, 0, stream>>>(args, n, fn);
  } else {
    HEADROOM_CUDA_DISPATCH_FLOAT(dtype, T, {
      constexpr int V = 16 / sizeof(T);
      if (aligned) {
        map_kernel<T, V><<<blocks_for((n + V - 1) / V), kThreads, 0, stream>>>(args, n, fn);
      } else {
        map_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(args, n, fn);
      }
    });
  }
  check_launch();
}

// ---- activations: the formulas of backend/cpu/activation.cpp

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// d/dx x sigmoid(x) = s (1 + x (1 - s))
__device__ __forceinline__ float silu_derivative(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

struct GeluForward {
  __device__ void operator()(const float (&in)[1], float (&out)[1]) const {
    const float v = in[0];
    const float t = tanhf(kGeluScale * (v + kGeluCubic * v * v * v));
    out[0] = 0.5f * v * (1.0f + t);
  }
};

struct GeluBackward {  // in: x, dy; out: dx
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float v = in[0];
    const float v2 = v * v;
    const float t = tanhf(kGeluScale * (v + kGeluCubic * v2 * v));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * v2);
    out[0] = in[1] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du_dx);
  }
};

struct SiluForward {
  __device__ void operator()(const float (&in)[1], float (&out)[1]) const {
    out[0] = in[0] * sigmoid(in[0]);
  }
};

struct SiluBackward {  // in: x, dy; out: dx
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    out[0] = in[1] * silu_derivative(in[0]);
  }
};

struct SwigluForward {  // in: gate, up
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    out[0] = in[0] * sigmoid(in[0]) * in[1];
  }
};

struct SwigluBackward {  // in: gate, up, d_out; out: d_gate, d_up
  __device__ void operator()(const float (&in)[3], float (&out)[2]) const {
    const float g = in[0];
    const float s = sigmoid(g);
    out[0] = in[2] * in[1] * (s * (1.0f + g * (1.0f - s)));
    out[1] = in[2] * (g * s);
  }
};

void gelu_forward(const Tensor& x, const Tensor& out) { map<1, 1>("gelu", {x}, {out}, GeluForward{}); }

void gelu_backward(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in) {
  map<2, 1>("gelu backward", {x, grad_out}, {grad_in}, GeluBackward{});
}

void silu_forward(const Tensor& x, const Tensor& out) { map<1, 1>("silu", {x}, {out}, SiluForward{}); }

void silu_backward(const Tensor& x, const Tensor& grad_out, const Tensor& grad_in) {
  map<2, 1>("silu backward", {x, grad_out}, {grad_in}, SiluBackward{});
}

void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  map<2, 1>("swiglu", {gate, up}, {out}, SwigluForward{});
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                     const Tensor& grad_gate, const Tensor& grad_up) {
  if (!grad_gate.defined() && !grad_up.defined()) return;
  map<3, 2>("swiglu backward", {gate, up, grad_out}, {grad_gate, grad_up}, SwigluBackward{});
}

// ---- arithmetic

__device__ __forceinline__ float apply(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
  }
  return 0.0f;
}

struct BinaryFn {
  BinaryOp op;
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    out[0] = apply(op, in[0], in[1]);
  }
};

struct ScaleFn {
  float factor;
  __device__ void operator()(const float (&in)[1], float (&out)[1]) const {
    out[0] = in[0] * factor;
  }
};

constexpr int kMaxDims = 8;

// a and b over out's shape after coalesce_dims; out is contiguous, so its offset is the linear
// index itself (merging keeps the row-major order of the elements).
struct BinaryLayout {
  int ndim = 0;
  int64_t size[kMaxDims];
  int64_t a_stride[kMaxDims];
  int64_t b_stride[kMaxDims];
};

__global__ void binary_strided_kernel(BinaryOp op, Operand a, Operand b, Operand out,
                                      BinaryLayout layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = layout.ndim - 1; d >= 0; --d) {
      const int64_t coord = rest % layout.size[d];
      rest /= layout.size[d];
      ia += coord * layout.a_stride[d];
      ib += coord * layout.b_stride[d];
    }
    store(out, i, apply(op, load(a, ia), load(b, ib)));
  }
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (a.is_contiguous() && b.is_contiguous()) {
    map<2, 1>("binary", {a, b}, {out}, BinaryFn{op});
    return;
  }
  const int64_t n = out.numel();
  if (n == 0) return;
  check_kernel_dtype("binary", "a", a.dtype());
  check_kernel_dtype("binary", "b", b.dtype());
  check_kernel_dtype("binary", "out", out.dtype());
  const StridedDims dims = coalesce_dims(a, &b);
  if (dims.sizes.size() > static_cast<size_t>(kMaxDims)) {
    throw NotImplementedError(str_cat("cuda binary: ", dims.sizes.size(),
                                      " non-mergeable dimensions exceed the kernel's limit of ",
                                      kMaxDims));
  }
  BinaryLayout layout;
  layout.ndim = static_cast<int>(dims.sizes.size());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.size[d] = dims.sizes[d];
    layout.a_stride[d] = dims.dst_strides[d];
    layout.b_stride[d] = dims.src_strides[d];
  }
  DeviceGuard guard(out.device().index);
  binary_strided_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      op, operand_of(a), operand_of(b), operand_of(out), layout, n);
  check_launch();
}

void scale(const Tensor& x, float factor, const Tensor& out) {
  map<1, 1>("scale", {x}, {out}, ScaleFn{factor});
}

// ---- dropout: Note [Dropout mask] in ops/dropout.cpp

// One thread per Philox block: elements 4b .. 4b + 3 read its four words (Note [Philox stream
// layout]), as the CPU's dropout_range does.
__global__ void dropout_kernel(Operand x, Operand out, int64_t n, uint64_t seed, uint64_t offset,
                               uint32_t threshold, float scale) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    const Philox4x32Block words = philox_block(seed, offset + static_cast<uint64_t>(b));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * b + k;
      if (i < n) store(out, i, load(x, i) * ((words.word[k] >> 8) >= threshold ? scale : 0.0f));
    }
  }
}

void dropout(const Tensor& x, uint64_t seed, uint64_t offset, uint32_t threshold, float scale,
             const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  check_kernel_dtype("dropout", "x", x.dtype());
  check_kernel_dtype("dropout", "out", out.dtype());
  DeviceGuard guard(x.device().index);
  dropout_kernel<<<blocks_for((n + 3) / 4), kThreads, 0, current_stream()>>>(
      operand_of(x), operand_of(out), n, seed, offset, threshold, scale);
  check_launch();
}

// ---- rotary embedding: backend/cpu/rotary.cpp

struct RotaryShape {
  int64_t heads = 0, seq_len = 0, dim = 0;
  int64_t stride[4] = {};  // x's strides, in elements
};

// Pairs (i, i + D/2) a block rotates at least, so that each block's table row is worth its cost.
constexpr int64_t kRotaryPairsPerBlock = 2048;
constexpr int kMaxGridY = 65535;

// Block (t, y) computes row t of the CPU's table (cpu::rotary_table) into shared memory, then
// rotates rows y, y + gridDim.y, ... of the B * H rows at position t. The table entry is computed
// as the CPU does in fp32, except that pow, cos and sin are taken in double and rounded once:
// the correctly rounded values, which glibc's powf / cosf / sinf also return in all but rare
// cases (they are accurate to about 0.8 ulp, not always correctly rounded).
__global__ void rotary_kernel(Operand x, Operand out, RotaryShape s, int64_t rows, float base,
                              int64_t position_offset, float sign) {
  extern __shared__ float table[];  // cos[half], then sin[half]
  const int64_t half = s.dim / 2;
  const int64_t t = blockIdx.x;
  const float position = static_cast<float>(position_offset + t);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(s.dim);
    const float inv_freq = 1.0f / static_cast<float>(pow(static_cast<double>(base),
                                                         static_cast<double>(exponent)));
    const double angle = static_cast<double>(position * inv_freq);
    table[i] = static_cast<float>(cos(angle));
    table[half + i] = static_cast<float>(sin(angle));
  }
  __syncthreads();
  // gridDim.y <= rows, so every block has at least one row.
  const int64_t my_rows = (rows - blockIdx.y + gridDim.y - 1) / gridDim.y;
  for (int64_t j = threadIdx.x; j < my_rows * half; j += blockDim.x) {
    const int64_t row = blockIdx.y + (j / half) * gridDim.y, i = j % half;
    const int64_t b = row / s.heads, h = row % s.heads;
    const int64_t in = b * s.stride[0] + h * s.stride[1] + t * s.stride[2];
    const int64_t o = (row * s.seq_len + t) * s.dim;
    const float c = table[i], sn = sign * table[half + i];
    const float x1 = load(x, in + i * s.stride[3]), x2 = load(x, in + (i + half) * s.stride[3]);
    // Explicit roundings: no contraction into an FMA, which the CPU kernel does not do either.
    store(out, o + i, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn)));
    store(out, o + half + i, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn)));
  }
}

void rotary(const Tensor& x, double theta, int64_t position_offset, bool inverse,
            const Tensor& out) {
  check_kernel_dtype("rotary", "x", x.dtype());
  check_kernel_dtype("rotary", "out", out.dtype());
  RotaryShape s;
  s.heads = x.size(1);
  s.seq_len = x.size(2);
  s.dim = x.size(3);
  for (int d = 0; d < 4; ++d) s.stride[d] = x.stride(d);
  const int64_t rows = x.size(0) * s.heads, half = s.dim / 2;
  if (rows == 0 || s.seq_len == 0 || half == 0) return;
  const size_t table_bytes = static_cast<size_t>(s.dim) * sizeof(float);
  if (table_bytes > 48 * 1024) {
    throw NotImplementedError(str_cat("cuda rotary: head size ", s.dim,
                                      " exceeds the kernel's limit of 12288"));
  }
  if (s.seq_len > INT32_MAX) {
    throw NotImplementedError(str_cat("cuda rotary: ", s.seq_len, " positions exceed the grid"));
  }
  const int64_t rows_per_block = (kRotaryPairsPerBlock + half - 1) / half;
  const dim3 grid(static_cast<unsigned>(s.seq_len),
                  static_cast<unsigned>(std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block,
                                                          kMaxGridY)));
  DeviceGuard guard(x.device().index);
  rotary_kernel<<<grid, kThreads, table_bytes, current_stream()>>>(
      operand_of(x), operand_of(out), s, rows, static_cast<float>(theta), position_offset,
      inverse ? -1.0f : 1.0f);
  check_launch();
}

const bool kRegistered = [] {
  DeviceOps& ops = mutable_device_ops(DeviceType::cuda);
  ops.gelu_forward = gelu_forward;
  ops.gelu_backward = gelu_backward;
  ops.silu_forward = silu_forward;
  ops.silu_backward = silu_backward;
  ops.swiglu_forward = swiglu_forward;
  ops.swiglu_backward = swiglu_backward;
  ops.binary = binary;
  ops.scale = scale;
  ops.dropout = dropout;
  ops.rotary = rotary;
  return true;
}();

}  // namespace
}  // namespace headroom::cuda
