// bitsandbytes' blockwise 4-bit codec on the CPU (see quant_4bit.h).
#include "backend/cpu/quant_4bit.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/blockwise_blocks.h"
#include "core/error.h"

namespace headroom::cpu {

// Note [4-bit quantization as bitsandbytes' CPU path]
// bitsandbytes 0.50 quantizes on the CPU with torch ops (backends/default/ops.py):
// - the full blocks: absmax = max |x| as is, scaled = clamp(x * (1 / max(absmax, 1e-38)), -1, 1),
//   a reciprocal multiply;
// - the short last block: absmax = max(max |x|, 1e-38) (stored clamped), scaled = clamp(x / absmax,
//   -1, 1), a true division;
// - the code: torch.bucketize(scaled, midpoints) over the code sorted by torch.argsort, i.e. the
//   number of fp32 midpoints (a + b) / 2 strictly below the value, so a value on a midpoint takes
//   the lower code; FP4 maps the sorted index back through argsort's order. FP4's two zeros
//   (codes 0 and 8, both +0.0) tie; torch's argsort puts code 0 first (kFp4Order), so values in
//   (-0.0026, 0] get code 0 and (0, 0.0026] code 8, as tools/gen_quant4bit_golden.py records.
// A block of zeros scales to 0 here without the 1e-38 reciprocal, which flush-to-zero
// (backend/cpu/denormals.h) would turn into inf * 0; bitsandbytes gets 0 there too. Under
// flush-to-zero, a block whose values are all subnormal reads as zeros (bitsandbytes, without
// it, scales them up by 1e38): the one case that differs.

namespace {

struct SortedCode {
  float midpoints[15];
  uint8_t order[16];  // order[k]: the code of the k-th smallest value
};

// argsort of FP4's values as torch orders them (the tie of codes 0 and 8 included).
// bitsandbytes' clamp(min=1e-38) of an absmax (a subnormal float).
constexpr float kMinAbsmax = 1e-38f;

constexpr uint8_t kFp4Order[16] = {11, 10, 13, 12, 15, 14, 9, 0, 8, 1, 6, 7, 4, 5, 2, 3};

SortedCode sorted_code(Quant4bitType type) {
  SortedCode s{};
  for (unsigned k = 0; k < 16; ++k) {
    s.order[k] = type == Quant4bitType::nf4 ? static_cast<uint8_t>(k) : kFp4Order[k];
  }
  for (unsigned k = 0; k < 15; ++k) {
    s.midpoints[k] =
        (quant_4bit_code_value(type, s.order[k]) + quant_4bit_code_value(type, s.order[k + 1])) /
        2.0f;
  }
  return s;
}

inline uint8_t bucketize(const SortedCode& s, float scaled) {
  unsigned k = 0;
  while (k < 15 && s.midpoints[k] < scaled) ++k;
  return s.order[k];
}

// The code of x * inverse = `scaled`. When that came out as zero for a nonzero x (x subnormal,
// or the product flushed: flush-to-zero is on in headroom's CPU threads), the exact product is a
// tiny value of x's sign, which matters for FP4's midpoint at 0 (its two zero codes): a tiny
// positive value is above that midpoint, a tiny negative one below every midpoint above -0.0026.
inline uint8_t code_of(const SortedCode& s, float x, float scaled) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (scaled != 0.0f || (bits & 0x7FFFFFFFu) == 0 || (bits >> 31) != 0) return bucketize(s, scaled);
  unsigned k = 0;
  while (k < 15 && s.midpoints[k] <= 0.0f) ++k;
  return s.order[k];
}

}  // namespace

std::array<float, 16> quant_4bit_code(Quant4bitType type) {
  std::array<float, 16> code{};
  for (unsigned q = 0; q < 16; ++q) code[q] = quant_4bit_code_value(type, q);
  return code;
}

void quantize_4bit(Quant4bitType type, const float* in, int64_t n, int64_t block_size,
                   uint8_t* packed, float* absmax) {
  HEADROOM_INTERNAL_ASSERT(block_size > 0 && block_size % 2 == 0, "quantize_4bit: block_size ",
                           block_size, " must be even and > 0");
  const SortedCode sorted = sorted_code(type);
  const int64_t full_blocks = n / block_size;
  const uint8_t zero_code = bucketize(sorted, 0.0f);
  for_each_block(in, n, block_size, [&](int64_t b, int64_t begin, int64_t end, float m) {
    const bool full = b < full_blocks;
    // A select, not arithmetic: with denormals-are-zero (backend/cpu/denormals.h) max() would
    // read the subnormal 1e-38 as 0 and keep a zero absmax.
    const float clamped = m > kMinAbsmax ? m : kMinAbsmax;
    absmax[b] = full ? m : clamped;
    const float inverse = 1.0f / clamped;
    // Blocks are even-sized, so no byte straddles two blocks.
    for (int64_t i = begin; i < end; i += 2) {
      uint8_t q[2] = {zero_code, zero_code};
      for (int64_t j = 0; j < 2 && i + j < end; ++j) {
        const float x = in[i + j];
        float s = m == 0.0f ? 0.0f : (full ? x * inverse : x / clamped);
        s = std::clamp(s, -1.0f, 1.0f);
        q[j] = code_of(sorted, x, s);
      }
      packed[i / 2] = static_cast<uint8_t>((q[0] << 4) | q[1]);
    }
  });
}

void dequantize_4bit(Quant4bitType type, const uint8_t* packed, const float* absmax, int64_t n,
                     int64_t block_size, float* out) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    out[i] = quant_4bit_code_value(type, unpack_4bit(packed, i)) * absmax[i / block_size];
  }
}

}  // namespace headroom::cpu
