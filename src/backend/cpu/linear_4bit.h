// The CPU kernels of the 4-bit linear (the `quantization` family, backend/quantization_kernels.h):
// weight tiles dequantized into the op's workspace and multiplied by cpu::gemm, inputs widened
// and results rounded one row tile at a time. Also the helpers the CUDA kernel shares.
#pragma once

#include "backend/cpu/quant_4bit.h"
#include "backend/quantization_kernels.h"
#include "core/float_formats.h"

namespace headroom::cpu {

// The operand's buffers as pointers (on its device).
Quant4bitPointers quant_4bit_pointers(const Quant4bitOperand& w);

// v rounded to the compute dtype and read back as fp32 (f32: v itself).
HEADROOM_HD inline float round_to_compute(float v, bool bf16, bool f16) {
  if (bf16) return bf16_bits_to_f32(f32_to_bf16_bits(v));
  if (f16) return f16_bits_to_f32(f32_to_f16_bits(v));
  return v;
}

// Element i (flat, row-major [rows, cols]) of the dequantized weight in fp32.
HEADROOM_HD inline float quant_4bit_element(const Quant4bitPointers& w, int64_t i) {
  return quant_4bit_code_value(w.type, unpack_4bit(w.packed, i)) *
         quant_4bit_block_absmax(w, i / w.blocksize);
}

}  // namespace headroom::cpu
