// The 4-bit linear of QLoRA's frozen base (bitsandbytes' Linear4bit.forward / MatMul4Bit):
// y = x @ dequant(W)^T + b computed in the compute dtype, the weight dequantized tile by tile
// inside the kernel (backend/quantization_kernels.h), never whole. Backward gives x (and the
// bias) a gradient; the 4-bit weight has none, so nothing is saved for one (not even x).
#pragma once

#include "backend/quantization_kernels.h"
#include "quant/quant_4bit.h"

namespace headroom {

// The weight as the quantization kernels read it (its tensors shared, not copied).
Quant4bitOperand quant_4bit_operand(const Quant4bitWeight& weight);

// x [..., in] -> [..., out] for a 4-bit weight of shape [out, in]; bias [out] or undefined.
// As bitsandbytes: x and bias are cast to compute_dtype (f32 / bf16 / f16), the product is
// computed there and cast back to x's dtype; each cast is recorded for autograd. On the meta
// device the same tensors are allocated and nothing runs. ValueError naming the argument for a
// shape mismatch or a compute dtype other than f32 / bf16 / f16.
Tensor linear_4bit(const Tensor& x, const Quant4bitWeight& weight, const Tensor& bias,
                   DType compute_dtype);

}  // namespace headroom
