// add / sub / mul with broadcasting and scale on CUDA, in fp32 from the tensors' own dtypes and
// rounded once to the output's: single IEEE operations, so they agree with the CPU kernels
// (backend/cpu/elementwise.cpp) bit for bit.
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/elementwise_map.cuh"
#include "backend/cuda/tensor_list.cuh"
#include "core/element_io.h"
#include "core/error.h"
#include "core/strided_dims.h"

namespace headroom::cuda {
namespace {

// ---- arithmetic

__device__ __forceinline__ float apply(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
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

// ---- list casts

// Pairs of a cast list; the blocks follow the sources' sizes (each destination has its source's).
struct CastPairs {
  ListTensor src[kTensorListCapacity];
  ListTensor dst[kTensorListCapacity];
  ListBlocks blocks;
};
static_assert(sizeof(CastPairs) + 64 <= kMaxKernelParameterBytes);

// Rounds as the copy kernel does (core/element_io.h), so a list cast equals Tensor::to.
__global__ void cast_list_kernel(const CastPairs pairs) {
  const ListRange range = pairs.blocks.range_of(pairs.src, blockIdx.x);
  const ListTensor& src = pairs.src[range.index];
  const ListTensor& dst = pairs.dst[range.index];
  const int64_t size = dst.dtype == DType::f32 ? 4 : 2;
  for (int64_t i = range.begin + threadIdx.x; i < range.end; i += blockDim.x) {
    store_from_f32(static_cast<char*>(dst.data) + i * size, dst.dtype, list_load(src, i),
                   Overflow::ieee);
  }
}

void cast_list(TensorList src, TensorList dst) {
  HEADROOM_CHECK(src.size() == dst.size() && src.size() <= kTensorListCapacity,
                 "cuda cast_list: ", src.size(), " sources and ", dst.size(),
                 " destinations; one each, at most ", kTensorListCapacity);
  if (src.empty()) return;
  CastPairs pairs;
  for (size_t i = 0; i < src.size(); ++i) {
    check_kernel_dtype("cast_list", "src", src[i].dtype());
    check_kernel_dtype("cast_list", "dst", dst[i].dtype());
    HEADROOM_CHECK(
        src[i].is_contiguous() && dst[i].is_contiguous() && src[i].numel() == dst[i].numel(),
        "cuda cast_list: pair ", i, ": src ", src[i].shape(), " and dst ", dst[i].shape(),
        " must be contiguous with as many elements");
    pairs.src[i] = ListTensor{src[i].data_ptr(), src[i].numel(), src[i].dtype()};
    pairs.dst[i] = ListTensor{dst[i].data_ptr(), dst[i].numel(), dst[i].dtype()};
  }
  const int32_t blocks = pairs.blocks.plan(static_cast<int32_t>(src.size()),
                                           [&](int32_t i) { return pairs.src[i].n; });
  if (blocks == 0) return;
  DeviceGuard guard(src.front().device().index);
  cast_list_kernel<<<blocks, kThreads, 0, current_stream()>>>(pairs);
  check_launch();
}

}  // namespace

void fill_elementwise_kernels(ElementwiseKernels& kernels) {
  kernels.binary = binary;
  kernels.scale = scale;
  kernels.cast_list = cast_list;
}

}  // namespace headroom::cuda
