// Blockwise 8-bit quantization as bitsandbytes does it (functional.py and its CUDA kernels): the
// dynamic quantization map, the nearest code of a value, and quantize / dequantize with one fp32
// absmax per block. The 8-bit optimizers (optim/adamw_8bit.h) keep their states this way.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace headroom::cpu {

// 256 values in ascending order; a code is an index into it.
using QuantizationMap = std::array<float, 256>;

// bitsandbytes' create_dynamic_map: for i = 0 .. max_exponent_bits - 1, the midpoints of
// linspace(0.1, 1, 2^i + 1) (signed) or linspace(0.1, 1, 2^(i+1) + 1) (unsigned) scaled by
// 10^(i - max_exponent_bits + 1), their negatives when signed, then 0 and 1, sorted. All in fp32 as
// PyTorch computes it; see Note [Dynamic map in fp32]. The signed map (for Adam's first moment)
// runs from -0.99296875 to 1, the unsigned one (second moment) from 0 to 1. ValueError when the
// arguments do not give 2^total_bits values (bitsandbytes' assertion) or total_bits is not 1..8.
// fused_linspace: torch 2's CPU linspace rounds start + step * i once (a fused multiply-add),
// which shifts 22 of the signed map's values by an ulp; bitsandbytes from PyPI builds its map on
// that torch, and 4-bit double quantization (quant/quant_4bit.h) uses that map.
QuantizationMap create_dynamic_map(bool is_signed, int max_exponent_bits = 7, int total_bits = 8,
                                   bool fused_linspace = false);

// The code of `x` (a value already divided by its block's absmax): bitsandbytes' dQuantize, a
// 7-step binary search that ends on an even index p and then picks the nearest of code[p - 1],
// code[p], code[p + 1] against fp32 midpoints, a tie going to p. NaN gives 0. `code` is a
// QuantizationMap or, in a CUDA kernel (backend/cuda/adamw_8bit.cu), its 256 values in an array.
template <typename Code>
HEADROOM_HD inline uint8_t quantize_nearest(const Code& code, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f;
  float val = code[127];
  for (int step = 64; step > 0; step >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += step;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= step;
    }
    val = code[static_cast<std::size_t>(pivot)];
  }
  if (upper_pivot == 255) upper = code[255];
  if (lower_pivot == 0) lower = code[0];
  if (x > val) {
    return static_cast<uint8_t>(x > (upper + val) * 0.5f ? upper_pivot : pivot);
  }
  return static_cast<uint8_t>(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

// Blocks of `block_size` consecutive elements (the last may be shorter): absmax[b] = max |in| over
// block b, out[i] = quantize_nearest(code, in[i] * (1 / absmax[b])) (a reciprocal multiply, as
// the CUDA kernel does). A block of zeros has absmax 0 and codes 0, which dequantize to 0.
// `absmax` holds ceil(n / block_size) floats. OpenMP over blocks.
void quantize_blockwise(const QuantizationMap& code, const float* in, int64_t n, int64_t block_size,
                        uint8_t* out, float* absmax);

// bitsandbytes' CPU quantize_blockwise (csrc/cpu_ops.cpp, 0.50): the same blocks and absmax as
// quantize_blockwise, but the code of x * (1 / absmax) is looked up in a table of 65536 bins
// over [-1, 1], each bin holding the code nearest to its left edge; see
// Note [bitsandbytes' CPU lookup table]. It can differ from quantize_nearest by one code near a
// midpoint. Double quantization of 4-bit weights (quant/quant_4bit.h) uses it on the CPU.
void quantize_blockwise_lut(const QuantizationMap& code, const float* in, int64_t n,
                            int64_t block_size, uint8_t* out, float* absmax);

// out[i] = code[in[i]] * absmax[i / block_size].
void dequantize_blockwise(const QuantizationMap& code, const uint8_t* in, const float* absmax,
                          int64_t n, int64_t block_size, float* out);

}  // namespace headroom::cpu
