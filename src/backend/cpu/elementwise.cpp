// The CPU's element-wise kernels (backend/elementwise_kernels.h). add / sub / mul read both
// operands through their strides, so broadcast operands (zero strides) are never materialised;
// the element order is out's, a run of the innermost coalesced dimension (core/strided_dims.h)
// at a time, cut into tiles of kTile elements that the threads share. Operands in bf16 / f16 are
// widened per tile into the thread's scratch; each element is one IEEE operation in fp32 rounded
// once into out's dtype, so the results equal the CUDA kernels' (backend/cuda/elementwise.cu)
// bit for bit.

#include <omp.h>

#include <vector>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/widen_rows.h"
#include "backend/elementwise_kernels.h"
#include "core/device_kernels.h"
#include "core/dtype_convert.h"
#include "core/error.h"
#include "core/strided_dims.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kGrain = 1 << 15;  // elements below which one thread does all
constexpr int64_t kTile = 4096;      // elements widened at a time

void check_dtype(const char* kernel, const char* argument, DType dtype) {
  HEADROOM_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "cpu ", kernel,
                 ": ", argument, " must be f32, bf16 or f16, not ", dtype_name(dtype));
}

// The value of one element of `dtype` at `p`, as fp32.
float load(const char* p, DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return static_cast<float>(*reinterpret_cast<const BFloat16*>(p));
    case DType::f16:
      return static_cast<float>(*reinterpret_cast<const Half*>(p));
    default:
      return *reinterpret_cast<const float*>(p);
  }
}

// `len` elements of `dtype`, `step` elements apart from `p`, as fp32: in place when they are
// contiguous f32, else widened into buf (one value repeated for a broadcast step of 0).
const float* read_run(const char* p, DType dtype, int64_t step, int64_t len, float* buf) {
  if (step == 1) {
    if (dtype == DType::f32) return reinterpret_cast<const float*>(p);
    convert_to_f32(p, dtype, buf, static_cast<size_t>(len));
    return buf;
  }
  if (step == 0) {
    const float v = load(p, dtype);
    for (int64_t i = 0; i < len; ++i) buf[i] = v;
    return buf;
  }
  const int64_t stride = step * static_cast<int64_t>(dtype_size(dtype));
  for (int64_t i = 0; i < len; ++i) buf[i] = load(p + i * stride, dtype);
  return buf;
}

void apply(BinaryOp op, const float* a, const float* b, float* out, int64_t n) {
  switch (op) {
    case BinaryOp::add:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      return;
    case BinaryOp::sub:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
      return;
    case BinaryOp::mul:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
      return;
  }
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  ensure_flush_denormal();
  check_dtype("binary", "a", a.dtype());
  check_dtype("binary", "b", b.dtype());
  check_dtype("binary", "out", out.dtype());
  HEADROOM_CHECK(out.is_contiguous() && a.shape() == out.shape() && b.shape() == out.shape(),
                 "cpu binary: a ", a.shape(), " and b ", b.shape(),
                 " must have the shape of the "
                 "contiguous out ",
                 out.shape());
  const int64_t n = out.numel();
  if (n == 0) return;
  // Coalescing keeps the elements' row-major order, so out's offset is the running index.
  StridedDims dims = coalesce_dims(a, &b);
  if (dims.sizes.empty()) dims = StridedDims{{1}, {0}, {0}};  // a single element
  const int64_t run = dims.sizes.back();
  const int64_t a_step = dims.dst_strides.back(), b_step = dims.src_strides.back();
  const int64_t tiles_per_run = (run + kTile - 1) / kTile;
  const int64_t tasks = n / run * tiles_per_run;
  const char* a_base = static_cast<const char*>(a.data_ptr());
  const char* b_base = static_cast<const char*>(b.data_ptr());
  const auto a_size = static_cast<int64_t>(a.element_size());
  const auto b_size = static_cast<int64_t>(b.element_size());
#pragma omp parallel for if (n > kGrain) schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t r = task / tiles_per_run, begin = task % tiles_per_run * kTile;
    const int64_t len = run - begin < kTile ? run - begin : kTile;
    // The start of run r in a and b, from its index over the outer dimensions.
    int64_t a_offset = begin * a_step, b_offset = begin * b_step;
    for (int64_t d = static_cast<int64_t>(dims.sizes.size()) - 2, rest = r; d >= 0; --d) {
      const int64_t i = rest % dims.sizes[d];
      rest /= dims.sizes[d];
      a_offset += i * dims.dst_strides[d];
      b_offset += i * dims.src_strides[d];
    }
    float* scratch = thread_scratch(3 * kTile);
    const float* av = read_run(a_base + a_offset * a_size, a.dtype(), a_step, len, scratch);
    const float* bv = read_run(b_base + b_offset * b_size, b.dtype(), b_step, len, scratch + kTile);
    const int64_t o = r * run + begin;
    float* target = span_target(out, o, scratch + 2 * kTile);
    apply(op, av, bv, target, len);
    store_span(out, o, len, target);
  }
}

// out = x * factor; x and out contiguous, possibly the same tensor.
void scale_tensor(const Tensor& x, float factor, const Tensor& out) {
  ensure_flush_denormal();
  check_dtype("scale", "x", x.dtype());
  check_dtype("scale", "out", out.dtype());
  HEADROOM_CHECK(x.is_contiguous() && out.is_contiguous() && x.numel() == out.numel(),
                 "cpu scale: x ", x.shape(), " and out ", out.shape(),
                 " must be contiguous with as many elements");
  const int64_t n = out.numel();
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for if (n > kGrain) schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t begin = t * kTile, len = n - begin < kTile ? n - begin : kTile;
    float* scratch = thread_scratch(2 * kTile);
    const float* xv = widen_span(x, begin, len, scratch);
    float* target = span_target(out, begin, scratch + kTile);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) target[i] = xv[i] * factor;
    store_span(out, begin, len, target);
  }
}

// Each pair through the CPU's copy kernel: the rounding of Tensor::to, bit for bit.
void cast_list(TensorList src, TensorList dst) {
  HEADROOM_CHECK(src.size() == dst.size(), "cpu cast_list: ", src.size(), " sources but ",
                 dst.size(), " destinations");
  const DeviceKernels& tensor = device_kernels(kCPU);
  for (size_t i = 0; i < src.size(); ++i) {
    check_dtype("cast_list", "src", src[i].dtype());
    check_dtype("cast_list", "dst", dst[i].dtype());
    HEADROOM_CHECK(
        src[i].is_contiguous() && dst[i].is_contiguous() && src[i].numel() == dst[i].numel(),
        "cpu cast_list: pair ", i, ": src ", src[i].shape(), " and dst ", dst[i].shape(),
        " must be contiguous with as many elements");
    if (dst[i].numel() > 0) tensor.copy(dst[i], src[i], Overflow::ieee);
  }
}

}  // namespace

void fill_elementwise_kernels(ElementwiseKernels& kernels) {
  kernels.binary = binary;
  kernels.scale = scale_tensor;
  kernels.cast_list = cast_list;
}

}  // namespace headroom::cpu
