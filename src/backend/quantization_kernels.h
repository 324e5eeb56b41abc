// The quantized tensors' kernel table (Note [Kernel tables] in backend/kernel_table.h): QLoRA's
// 4-bit codec (quantize, double-quantize, dequantize: quant/quant_4bit.h) and the 4-bit linear
// of its frozen base (quant/linear_4bit.h). Its weight is dequantized tile by tile
// inside the kernel, never as a whole matrix; the op allocates the outputs and a workspace whose
// size is a function of the shapes only (the same on every device), so a dry run on the meta
// device plans the same bytes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/quant_4bit_type.h"
#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// A 4-bit weight [rows, cols] (out, in) as the kernels read it: bitsandbytes' packed codes (any
// storage dtype; read as bytes) and per-block absmax, either f32 [blocks] or, double-quantized,
// u8 codes with absmax(b) = nested_code[code_b] * nested_absmax[b / 256] + offset.
struct Quant4bitOperand {
  Tensor packed;
  Tensor absmax;
  Tensor nested_absmax;  // undefined unless nested
  Tensor nested_code;    // undefined unless nested
  float offset = 0.0f;
  bool nested = false;
  Quant4bitType type = Quant4bitType::nf4;
  int64_t blocksize = 64;
  int64_t rows = 0, cols = 0;
};

// Tiles of the CPU kernels: output features (forward) or input features (backward) per
// dequantized weight tile, and rows of x per widened tile.
inline constexpr int64_t kLinear4bitWeightTile = 128;
inline constexpr int64_t kLinear4bitRowTile = 256;

// f32 elements of the workspaces the op allocates for x [rows, in] @ W[out, in]^T: one weight
// tile, one row tile of the input and one of the result.
inline int64_t linear_4bit_forward_workspace(int64_t rows, int64_t in, int64_t out) {
  const int64_t r = std::min(rows, kLinear4bitRowTile), t = std::min(out, kLinear4bitWeightTile);
  return t * in + r * in + r * t;
}
inline int64_t linear_4bit_backward_workspace(int64_t rows, int64_t in, int64_t out) {
  const int64_t r = std::min(rows, kLinear4bitRowTile), t = std::min(in, kLinear4bitWeightTile);
  return out * t + r * out + r * t;
}

// Double quantization's blocks of absmax values (bitsandbytes' quantize_blockwise default).
inline constexpr int64_t kQuant4bitNestedBlocksize = 256;

struct QuantizationKernels {
  static constexpr const char* kName = "quantization";

  // weight (contiguous f32, bf16 or f16, read as fp32) in blocks of `blocksize` values: packed
  // (ceil(numel / 2) bytes, two codes a byte, high nibble first; any storage dtype) and absmax
  // (f32 [blocks]), bit for bit as bitsandbytes' CPU path (Note [4-bit quantization as
  // bitsandbytes' CPU path] in backend/cpu/quant_4bit.cpp).
  Kernel<void(const Tensor& weight, Quant4bitType type, int64_t blocksize, const Tensor& packed,
              const Tensor& absmax)>
      quantize_4bit{"quantize_4bit"};
  // Double quantization of absmax (f32 [blocks], overwritten): offset (f32 [1]) = its mean as
  // torch sums (Note [Mean of the absmax as torch sums] in backend/cpu/torch_mean.h), absmax -=
  // offset, then bitsandbytes' blockwise 8-bit quantization of it in blocks of
  // kQuant4bitNestedBlocksize against the signed dynamic map, which nested_code (f32 [256])
  // receives: codes (u8 [blocks]) and nested_absmax (f32 [ceil(blocks / 256)]).
  Kernel<void(const Tensor& absmax, const Tensor& offset, const Tensor& codes,
              const Tensor& nested_absmax, const Tensor& nested_code)>
      quantize_absmax_nested{"quantize_absmax_nested"};
  // out (f32, bf16 or f16, w's rows x cols elements) = code * absmax in fp32, rounded once.
  Kernel<void(const Quant4bitOperand& w, const Tensor& out)> dequantize_4bit{"dequantize_4bit"};

  // y [rows, out] = x [rows, in] @ dequant(w)^T (+ bias [out]). x, bias and y share the compute
  // dtype (f32, bf16, f16); each weight element is code * absmax in fp32 rounded to it, products
  // are summed in fp32 and y rounded once. workspace: f32 [linear_4bit_forward_workspace].
  Kernel<void(const Tensor& x, const Quant4bitOperand& w, const Tensor& bias,
              const Tensor& workspace, const Tensor& y)>
      linear_4bit_forward{"linear_4bit_forward"};
  // grad_x [rows, in] = grad_y [rows, out] @ dequant(w), the same numerics; the weight gets no
  // gradient. workspace: f32 [linear_4bit_backward_workspace].
  Kernel<void(const Tensor& grad_y, const Quant4bitOperand& w, const Tensor& workspace,
              const Tensor& grad_x)>
      linear_4bit_backward_input{"linear_4bit_backward_input"};
};

}  // namespace headroom
