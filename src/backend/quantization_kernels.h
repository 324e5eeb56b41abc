// The quantized tensors' kernel table (Note [Kernel tables] in backend/kernel_table.h): the 4-bit
// linear of QLoRA's frozen base (quant/linear_4bit.h). Its weight is dequantized tile by tile
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

struct QuantizationKernels {
  static constexpr const char* kName = "quantization";

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
