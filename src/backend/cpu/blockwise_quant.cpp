// The dynamic quantization map and the blockwise codec (see blockwise_quant.h).
#include "backend/cpu/blockwise_quant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

std::vector<float> linspace_f32(float start, float end, int64_t steps) {
  std::vector<float> values(static_cast<size_t>(steps), start);
  if (steps < 2) return values;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i) {
    values[static_cast<size_t>(i)] = i < halfway
                                         ? start + step * static_cast<float>(i)
                                         : end - step * static_cast<float>(steps - i - 1);
  }
  return values;
}

// The midpoints of linspace(0.1, 1, items) times fp32(10^exponent), and their negatives if signed.
void append_scaled_midpoints(std::vector<float>& data, int64_t items, int exponent,
                             bool is_signed) {
  const std::vector<float> bounds = linspace_f32(0.1f, 1.0f, items);
  const float scale = static_cast<float>(std::pow(10.0, exponent));
  for (size_t k = 0; k + 1 < bounds.size(); ++k) data.push_back(scale * ((bounds[k] + bounds[k + 1]) / 2.0f));
  if (!is_signed) return;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) data.push_back(-scale * ((bounds[k] + bounds[k + 1]) / 2.0f));
}

}  // namespace

QuantizationMap create_dynamic_map(bool is_signed, int max_exponent_bits, int total_bits) {
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
    append_scaled_midpoints(data, (int64_t{1} << shift) + 1, i - (max_exponent_bits - 1),
                            is_signed);
  }
  if (additional_items > 0) append_scaled_midpoints(data, additional_items + 1, 0, is_signed);
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() != (size_t{1} << total_bits)) {
    throw ValueError(str_cat("create_dynamic_map: signed=", is_signed, ", max_exponent_bits=",
                             max_exponent_bits, ", total_bits=", total_bits, " gives ",
                             data.size(), " values, not 2^total_bits = ", 1 << total_bits));
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

void quantize_blockwise(const QuantizationMap& code, const float* in, int64_t n,
                        int64_t block_size, uint8_t* out, float* absmax) {
  check_block_size("quantize_blockwise", block_size);
  const int64_t blocks = (n + block_size - 1) / block_size;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block_size;
    const int64_t end = std::min(n, begin + block_size);
    float block_max = 0.0f;
    for (int64_t i = begin; i < end; ++i) block_max = std::max(block_max, std::fabs(in[i]));
    absmax[b] = block_max;
    const float inverse = 1.0f / block_max;
    for (int64_t i = begin; i < end; ++i) out[i] = quantize_nearest(code, in[i] * inverse);
  }
}

void dequantize_blockwise(const QuantizationMap& code, const uint8_t* in, const float* absmax,
                          int64_t n, int64_t block_size, float* out) {
  check_block_size("dequantize_blockwise", block_size);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = code[in[i]] * absmax[i / block_size];
}

}  // namespace headroom::cpu
