// The 4-bit codes of QLoRA (NF4, FP4) and bitsandbytes' blockwise 4-bit codec on raw buffers:
// the quantizer of its CPU path (backends/default/ops.py quantize_4bit), the nibble order of its
// packed bytes, and the code lookup the 4-bit linear kernels (CPU and CUDA) dequantize with.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "backend/quant_4bit_type.h"
#include "core/host_device.h"

namespace headroom::cpu {

using Quant4bitType = headroom::Quant4bitType;

using headroom::quant_4bit_code;
using headroom::quant_4bit_code_value;

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

// The code sorted by value, its 15 fp32 midpoints, and which code each sorted place is (FP4's
// order is torch.argsort's, ties included): Note [4-bit quantization as bitsandbytes' CPU path]
// in quant_4bit.cpp. The CPU and CUDA quantizers share it and the functions below.
struct Quant4bitSortedCode {
  float midpoints[15];
  uint8_t order[16];  // order[k]: the code of the k-th smallest value
};

inline constexpr uint8_t kFp4SortedOrder[16] = {11, 10, 13, 12, 15, 14, 9, 0,
                                                8,  1,  6,  7,  4,  5,  2, 3};
// bitsandbytes' clamp(min=1e-38) of an absmax (a subnormal float).
inline constexpr float kQuant4bitMinAbsmax = 1e-38f;

inline Quant4bitSortedCode quant_4bit_sorted_code(Quant4bitType type) {
  Quant4bitSortedCode s{};
  for (unsigned k = 0; k < 16; ++k) {
    s.order[k] = type == Quant4bitType::nf4 ? static_cast<uint8_t>(k) : kFp4SortedOrder[k];
  }
  for (unsigned k = 0; k < 15; ++k) {
    s.midpoints[k] =
        (quant_4bit_code_value(type, s.order[k]) + quant_4bit_code_value(type, s.order[k + 1])) /
        2.0f;
  }
  return s;
}

// torch.bucketize over the midpoints: the code of a scaled value.
HEADROOM_HD inline uint8_t quant_4bit_bucketize(const Quant4bitSortedCode& s, float scaled) {
  unsigned k = 0;
  while (k < 15 && s.midpoints[k] < scaled) ++k;
  return s.order[k];
}

// The code of x * inverse = `scaled`. When that came out as zero for a nonzero x (x subnormal,
// or the product flushed: flush-to-zero is on in headroom's CPU threads), the exact product is a
// tiny value of x's sign, which matters for FP4's midpoint at 0 (its two zero codes): a tiny
// positive value is above that midpoint, a tiny negative one below every midpoint above -0.0026.
HEADROOM_HD inline uint8_t quant_4bit_code_of(const Quant4bitSortedCode& s, float x, float scaled) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (scaled != 0.0f || (bits & 0x7FFFFFFFu) == 0 || (bits >> 31) != 0) {
    return quant_4bit_bucketize(s, scaled);
  }
  unsigned k = 0;
  while (k < 15 && s.midpoints[k] <= 0.0f) ++k;
  return s.order[k];
}

// Block b of the n values at(0 .. n - 1) (fp32) quantized: its absmax and its bytes of packed,
// as bitsandbytes' CPU path (the short last block divides, the full ones multiply by the
// reciprocal; an odd n pads the last low nibble with the code of 0). Blocks are even-sized, so
// no byte straddles two blocks.
template <typename At>
HEADROOM_HD void quantize_4bit_block(const Quant4bitSortedCode& s, const At& at, int64_t n,
                                     int64_t block_size, int64_t b, uint8_t* packed,
                                     float* absmax) {
  const int64_t begin = b * block_size;
  const int64_t end = begin + block_size < n ? begin + block_size : n;
  float m = 0.0f;
  for (int64_t i = begin; i < end; ++i) {
    const float x = at(i);
    const float v = x < 0.0f ? -x : x;
    if (m < v) m = v;  // std::max's comparison: a NaN never replaces the running max
  }
  const bool full = end - begin == block_size;
  // A select, not arithmetic: with denormals-are-zero (backend/cpu/denormals.h) max() would
  // read the subnormal 1e-38 as 0 and keep a zero absmax.
  const float clamped = m > kQuant4bitMinAbsmax ? m : kQuant4bitMinAbsmax;
  absmax[b] = full ? m : clamped;
  const float inverse = 1.0f / clamped;
  const uint8_t zero_code = quant_4bit_bucketize(s, 0.0f);
  for (int64_t i = begin; i < end; i += 2) {
    uint8_t q[2] = {zero_code, zero_code};
    for (int64_t j = 0; j < 2 && i + j < end; ++j) {
      const float x = at(i + j);
      float scaled = m == 0.0f ? 0.0f : (full ? x * inverse : x / clamped);
      scaled = scaled < -1.0f ? -1.0f : (1.0f < scaled ? 1.0f : scaled);  // std::clamp's order
      q[j] = quant_4bit_code_of(s, x, scaled);
    }
    packed[i / 2] = static_cast<uint8_t>((q[0] << 4) | q[1]);
  }
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
