// The 4-bit codes of QLoRA (NF4, FP4) and bitsandbytes' blockwise 4-bit codec on raw buffers:
// the quantizer of its CPU path (backends/default/ops.py quantize_4bit), the nibble order of its
// packed bytes, and the code lookup the 4-bit linear kernels (CPU and CUDA) dequantize with.
#pragma once

#include <array>
#include <cstdint>

#include "backend/quant_4bit_type.h"
#include "core/host_device.h"

namespace headroom::cpu {

using Quant4bitType = headroom::Quant4bitType;

// bitsandbytes' get_4bit_type: NF4 ascending; FP4 (E2M1, bit 3 the sign) by its bit pattern,
// [0, 0.0625, 8, 12, 4, 6, 2, 3, -0, -0.0625, -8, -12, -4, -6, -2, -3] / 12 in fp32, where its
// "-0" is a Python int, so code 8 is +0.0 (the quant_map bitsandbytes saves says so too).
HEADROOM_HD inline float quant_4bit_code_value(Quant4bitType type, unsigned q) {
  constexpr float kNf4[16] = {-1.0f,
                              -0.6961928009986877f,
                              -0.5250730514526367f,
                              -0.39491748809814453f,
                              -0.28444138169288635f,
                              -0.18477343022823334f,
                              -0.09105003625154495f,
                              0.0f,
                              0.07958029955625534f,
                              0.16093020141124725f,
                              0.24611230194568634f,
                              0.33791524171829224f,
                              0.44070982933044434f,
                              0.5626170039176941f,
                              0.7229568362236023f,
                              1.0f};
  constexpr float kFp4[16] = {
      0.0f, 0.0625f / 12,  8.0f / 12,  12.0f / 12,  4.0f / 12,  6.0f / 12,  2.0f / 12,  3.0f / 12,
      0.0f, -0.0625f / 12, -8.0f / 12, -12.0f / 12, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};
  return type == Quant4bitType::nf4 ? kNf4[q & 15u] : kFp4[q & 15u];
}

std::array<float, 16> quant_4bit_code(Quant4bitType type);

// A 4-bit weight's buffers as raw pointers on its device, for the kernels.
struct Quant4bitPointers {
  const uint8_t* packed = nullptr;
  const float* absmax = nullptr;          // f32 per block, when not nested
  const uint8_t* absmax_codes = nullptr;  // u8 per block, when nested
  const float* nested_absmax = nullptr;
  const float* nested_code = nullptr;
  float offset = 0.0f;
  Quant4bitType type = Quant4bitType::nf4;
  int64_t blocksize = 64;
};

// Block b's absmax; nested: nested_code[code] * nested_absmax[b / 256], then + offset, each
// rounded on its own as bitsandbytes (a dequantized tensor, then += offset): no fused multiply-add.
HEADROOM_HD inline float quant_4bit_block_absmax(const Quant4bitPointers& w, int64_t b) {
  if (!w.nested_code) return w.absmax[b];
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(w.nested_code[w.absmax_codes[b]], w.nested_absmax[b >> 8]), w.offset);
#else
  const float scaled = w.nested_code[w.absmax_codes[b]] * w.nested_absmax[b >> 8];
  return scaled + w.offset;
#endif
}

// Element i of a packed buffer: byte i / 2 holds element 2k in its HIGH nibble and 2k + 1 in its
// low nibble (bitsandbytes' packing).
HEADROOM_HD inline unsigned unpack_4bit(const uint8_t* packed, int64_t i) {
  const unsigned byte = packed[i >> 1];
  return (i & 1) ? (byte & 15u) : (byte >> 4);
}

// Quantizes n fp32 values in blocks of block_size into ceil(n / 2) packed bytes and
// ceil(n / block_size) fp32 absmax values, bit for bit as bitsandbytes' CPU path does; see
// Note [4-bit quantization as bitsandbytes' CPU path]. An odd n pads the last low nibble with the
// code of 0. OpenMP over blocks.
void quantize_4bit(Quant4bitType type, const float* in, int64_t n, int64_t block_size,
                   uint8_t* packed, float* absmax);

// out[i] = code[q_i] * absmax[i / block_size], in fp32 (as bitsandbytes before its final cast).
void dequantize_4bit(Quant4bitType type, const uint8_t* packed, const float* absmax, int64_t n,
                     int64_t block_size, float* out);

}  // namespace headroom::cpu
