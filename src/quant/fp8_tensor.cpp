// Quantizing to and from FP8 tensors (see fp8_tensor.h): checks, allocations, kernel calls.
#include "quant/fp8_tensor.h"

#include "core/error.h"
#include "core/record_function.h"

namespace headroom {

namespace {

void check_quantize(const char* op, const Tensor& x, DType fp8_dtype) {
  HEADROOM_CHECK_VALUE(
      x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16, op, ": x is ",
      dtype_name(x.dtype()), "; FP8 quantizes f32, bf16 or f16");
  HEADROOM_CHECK_VALUE(fp8_dtype == DType::f8_e4m3fn || fp8_dtype == DType::f8_e5m2, op,
                       ": the target ", dtype_name(fp8_dtype), " is not f8_e4m3fn or f8_e5m2");
  HEADROOM_CHECK_VALUE(x.ndim() >= 1, op, ": x must be at least 1-D, got ", x.shape());
}

int64_t rows_of(const Tensor& t) {
  const int64_t cols = t.size(-1);
  return cols == 0 ? 0 : t.numel() / cols;
}

}  // namespace

int64_t Fp8Tensor::bytes() const {
  return static_cast<int64_t>(data.nbytes() + (scales.defined() ? scales.nbytes() : 0));
}

Fp8Tensor fp8_quantize_tensorwise(const Tensor& x, DType fp8_dtype, const Tensor& scale,
                                  bool scale_from_amax, const Tensor& amax, const Tensor& counts) {
  RecordFunction record("fp8_quantize", x);
  check_quantize("fp8_quantize", x, fp8_dtype);
  const Tensor xc = x.contiguous();
  Fp8Tensor q;
  q.data = Tensor::empty(x.shape(), fp8_dtype, x.device());
  q.scales = Tensor::empty({1}, DType::f32, x.device());
  need_kernel("fp8_quantize", x.device(), &Fp8Kernels::quantize_tensorwise)(
      xc, scale, scale_from_amax, q.data, q.scales, amax, counts);
  return q;
}

Fp8Tensor fp8_quantize_blockwise(const Tensor& x, DType fp8_dtype, Fp8BlockShape block,
                                 const Tensor& counts) {
  RecordFunction record("fp8_quantize", x);
  check_quantize("fp8_quantize", x, fp8_dtype);
  HEADROOM_CHECK_VALUE(block.block_rows >= 1 && block.block_cols >= 1, "fp8_quantize: block ",
                       block.block_rows, " x ", block.block_cols, " must be at least 1 x 1");
  const Tensor xc = x.contiguous();
  Fp8Tensor q;
  q.block = block;
  q.data = Tensor::empty(x.shape(), fp8_dtype, x.device());
  q.scales = Tensor::empty(fp8_scales_shape(rows_of(x), x.size(-1), block),
                           block.e8m0 ? DType::u8 : DType::f32, x.device());
  if (x.numel() == 0) return q;
  need_kernel("fp8_quantize", x.device(), &Fp8Kernels::quantize_blockwise)(xc, block, q.data,
                                                                           q.scales, counts);
  return q;
}

Tensor fp8_dequantize(const Fp8Tensor& q, DType dtype) {
  RecordFunction record("fp8_dequantize", q.data);
  HEADROOM_CHECK_VALUE(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
                       "fp8_dequantize: the result dtype ", dtype_name(dtype),
                       " is not f32, bf16 or f16");
  Tensor out = Tensor::empty(q.data.shape(), dtype, q.data.device());
  if (out.numel() == 0) return out;
  need_kernel("fp8_dequantize", out.device(), &Fp8Kernels::dequantize)(q.data, q.scales, q.block,
                                                                       out);
  return out;
}

Fp8Tensor fp8_transpose(const Fp8Tensor& q) {
  HEADROOM_CHECK_VALUE(q.data.ndim() == 2 && fp8_per_tensor(q.block),
                       "fp8_transpose: a 2-D tensor with one scale, got ", q.data.shape());
  return {q.data.transpose(0, 1).contiguous(), q.scales, q.block};
}

}  // namespace headroom
