// The dynamic quantization map and the blockwise codec (see blockwise_quant.h).
#include "backend/cpu/blockwise_quant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/blockwise_blocks.h"
#include "core/error.h"

namespace headroom::cpu {

// Note [Dynamic map in fp32]
// bitsandbytes builds the map with torch in fp32: b = torch.linspace(0.1, 1, k), means =
// (b[:-1] + b[1:]) / 2.0, then means * 10**e with the Python float 10**e rounded to fp32 first.
// PyTorch's CPU linspace (its scalar kernel; PyTorch dropped the vectorised one for precision)
// computes step = (end - start) / (k - 1) in fp32, start + step * i for the first k / 2 values and
// end - step * (k - 1 - i) for the rest. torch 1.13's vectorised kernel gave 44 of the 256 signed
// values (46 unsigned) 1-2 ulp apart; tools/gen_adamw8bit_golden.py prints that comparison.

namespace {

std::vector<float> linspace_f32(float start, float end, int64_t steps, bool fused) {
  std::vector<float> values(static_cast<size_t>(steps), start);
  if (steps < 2) return values;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i) {
    const float from_start = static_cast<float>(i);
    const float from_end = static_cast<float>(steps - i - 1);
    values[static_cast<size_t>(i)] =
        fused ? (i < halfway ? std::fma(step, from_start, start) : std::fma(-step, from_end, end))
              : (i < halfway ? start + step * from_start : end - step * from_end);
  }
  return values;
}

// The midpoints of linspace(0.1, 1, items) times fp32(10^exponent), and their negatives if signed.
void append_scaled_midpoints(std::vector<float>& data, int64_t items, int exponent, bool is_signed,
                             bool fused) {
  const std::vector<float> bounds = linspace_f32(0.1f, 1.0f, items, fused);
  const float scale = static_cast<float>(std::pow(10.0, exponent));
  for (size_t k = 0; k + 1 < bounds.size(); ++k)
    data.push_back(scale * ((bounds[k] + bounds[k + 1]) / 2.0f));
  if (!is_signed) return;
  for (size_t k = 0; k + 1 < bounds.size(); ++k)
    data.push_back(-scale * ((bounds[k] + bounds[k + 1]) / 2.0f));
}

}  // namespace

QuantizationMap create_dynamic_map(bool is_signed, int max_exponent_bits, int total_bits,
                                   bool fused_linspace) {
  if (total_bits < 1 || total_bits > 8) {
    throw ValueError(str_cat("create_dynamic_map: total_bits ", total_bits,
                             " is outside 1..8 (a code is one byte)"));
  }
  if (max_exponent_bits < 1 || max_exponent_bits > total_bits - 1) {
    throw ValueError(str_cat("create_dynamic_map: max_exponent_bits ", max_exponent_bits,
                             " is outside 1..", total_bits - 1, " (total_bits - 1)"));
  }
  // As bitsandbytes: one bit is the sign or, unsigned, the indicator bit of the linear region.
  const int non_sign_bits = total_bits - 1;
  const int64_t additional_items = (int64_t{1} << (non_sign_bits - max_exponent_bits)) - 1;
  std::vector<float> data;
  for (int i = 0; i < max_exponent_bits; ++i) {
    const int shift = i + non_sign_bits - max_exponent_bits + (is_signed ? 0 : 1);
    append_scaled_midpoints(data, (int64_t{1} << shift) + 1, i - (max_exponent_bits - 1), is_signed,
                            fused_linspace);
  }
  if (additional_items > 0) {
    append_scaled_midpoints(data, additional_items + 1, 0, is_signed, fused_linspace);
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() != (size_t{1} << total_bits)) {
    throw ValueError(str_cat("create_dynamic_map: signed=", is_signed, ", max_exponent_bits=",
                             max_exponent_bits, ", total_bits=", total_bits, " gives ", data.size(),
                             " values, not 2^total_bits = ", 1 << total_bits));
  }
  data.resize(256, 0.0f);  // fewer bits: the unused codes are zeros, as bitsandbytes pads
  std::sort(data.begin(), data.end());
  QuantizationMap code;
  std::copy(data.begin(), data.end(), code.begin());
  return code;
}

namespace {

void check_block_size(const char* op, int64_t block_size) {
  if (block_size <= 0) throw ValueError(str_cat(op, ": block_size ", block_size, " must be > 0"));
}

}  // namespace

void quantize_blockwise(const QuantizationMap& code, const float* in, int64_t n, int64_t block_size,
                        uint8_t* out, float* absmax) {
  check_block_size("quantize_blockwise", block_size);
  for_each_block(in, n, block_size, [&](int64_t b, int64_t begin, int64_t end, float block_max) {
    absmax[b] = block_max;
    const float inverse = 1.0f / block_max;
    for (int64_t i = begin; i < end; ++i) out[i] = quantize_nearest(code, in[i] * inverse);
  });
}

// Note [bitsandbytes' CPU lookup table]
// bitsandbytes 0.50 replaced the binary search of its CPU quantizer by a table: bin i of 65536
// stands for v_i = -1 + (2 * i) / 65535 and holds the smallest code k whose midpoint
// 0.5 * (code[k] + code[k + 1]) is not below v_i; a value goes to bin
// uint16((clamp(x, -1, 1) + 1) * 0.5 * 65535 + 0.5). All in fp32, and its x86 build compiles
// that file with FMA enabled, so GCC contracts the final multiply-add into one fused operation
// (the clamp keeps x * inv + 1 apart): std::fma reproduces it.
namespace {

std::vector<uint8_t> build_quantize_lut(const QuantizationMap& code) {
  constexpr int kLutSize = 65536;
  float midpoints[255];
  for (int i = 0; i < 255; ++i) midpoints[i] = 0.5f * (code[i] + code[i + 1]);
  std::vector<uint8_t> lut(kLutSize);
  int k = 0;
  for (int i = 0; i < kLutSize; ++i) {
    const float v = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kLutSize - 1);
    while (k < 255 && midpoints[k] < v) ++k;
    lut[static_cast<size_t>(i)] = static_cast<uint8_t>(k);
  }
  return lut;
}

inline uint16_t lut_index(float x, float inverse) {
  const float scaled = std::clamp(x * inverse, -1.0f, 1.0f);
  return static_cast<uint16_t>(std::fma((scaled + 1.0f) * 0.5f, 65535.0f, 0.5f));
}

}  // namespace

void quantize_blockwise_lut(const QuantizationMap& code, const float* in, int64_t n,
                            int64_t block_size, uint8_t* out, float* absmax) {
  check_block_size("quantize_blockwise_lut", block_size);
  const std::vector<uint8_t> lut = build_quantize_lut(code);
  for_each_block(in, n, block_size, [&](int64_t b, int64_t begin, int64_t end, float block_max) {
    absmax[b] = block_max;
    if (block_max == 0.0f) {
      for (int64_t i = begin; i < end; ++i) out[i] = 0;
      return;
    }
    const float inverse = 1.0f / block_max;
    for (int64_t i = begin; i < end; ++i) out[i] = lut[lut_index(in[i], inverse)];
  });
}

void dequantize_blockwise(const QuantizationMap& code, const uint8_t* in, const float* absmax,
                          int64_t n, int64_t block_size, float* out) {
  check_block_size("dequantize_blockwise", block_size);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = code[in[i]] * absmax[i / block_size];
}

}  // namespace headroom::cpu
