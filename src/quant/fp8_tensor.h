// FP8 tensors with their scales, as Transformer Engine's Float8Tensor / MXFP8Tensor /
// Float8BlockwiseQTensor hold them: E4M3 or E5M2 data of the tensor's shape and the scale_inv
// (per tensor, fp32 per block, or E8M0 exponents per 1 x 32 block). Quantizing and dequantizing
// are ops on the fp8 kernel table (backend/fp8_kernels.h): the same allocations on every device.
#pragma once

#include "backend/fp8_kernels.h"
#include "core/tensor.h"

namespace headroom {

struct Fp8Tensor {
  Tensor data;    // f8_e4m3fn or f8_e5m2, the tensor's shape
  Tensor scales;  // f32 [1] scale_inv per tensor; per block f32 scale_inv or u8 E8M0
  Fp8BlockShape block;

  bool defined() const { return data.defined(); }
  int64_t bytes() const;
};

// Per tensor with delayed scaling: q = saturate(x * scale) with the slot's `scale` (f32 [1]),
// recording max|x| into `amax` (f32 [1], the history's slot 0). With current scaling
// (scale_from_amax) scale and amax are overwritten from x first. counts: i64 [2] or undefined.
Fp8Tensor fp8_quantize_tensorwise(const Tensor& x, DType fp8_dtype, const Tensor& scale,
                                  bool scale_from_amax, const Tensor& amax,
                                  const Tensor& counts = Tensor());

// Per block (block.block_rows >= 1): x viewed as [rows, last dimension].
Fp8Tensor fp8_quantize_blockwise(const Tensor& x, DType fp8_dtype, Fp8BlockShape block,
                                 const Tensor& counts = Tensor());

// The values in `dtype` (f32, bf16, f16): data * its scale_inv, rounded once.
Tensor fp8_dequantize(const Fp8Tensor& q, DType dtype);

// The FP8 transpose of a 2-D FP8 tensor per tensor scale (the column-wise copy cuBLASLt's TN
// layout needs): the bytes transposed, the scale shared.
Fp8Tensor fp8_transpose(const Fp8Tensor& q);

}  // namespace headroom
