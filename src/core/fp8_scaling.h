// The scalar formulas of Transformer Engine's FP8 scaling recipes (REFERENCES.md "FP8 scaling
// recipes"): the scale a recipe derives from an amax, E8M0 block exponents, and the saturating cast
// with its overflow / underflow tests. HEADROOM_HD and table-free, so that the CPU kernels, the
// CUDA kernels and the recipes' host code compute the same bits (Note [Narrow float semantics]).
#pragma once

#include <cstdint>

#include "core/float_formats.h"
#include "core/host_device.h"

namespace headroom {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;
inline constexpr float kFloat32Max = 3.40282346638528859812e+38f;

namespace fp8_detail {

HEADROOM_HD constexpr bool is_nan(float x) { return !(x == x); }
// On the bits: 1.0f / 0.0f is no constant expression for clang.
HEADROOM_HD constexpr bool is_inf(float x) {
  return (detail::f32_bits(x) & 0x7FFFFFFFu) == 0x7F800000u;
}
HEADROOM_HD constexpr bool is_finite(float x) { return !is_nan(x) && !is_inf(x); }
// Tests on the bits, so that a subnormal amax counts as nonzero also where the CPU runs with
// denormals-are-zero (backend/cpu/denormals.h) or a GPU flushes them: TE's update compares in
// IEEE arithmetic.
HEADROOM_HD constexpr bool is_zero(float x) { return (detail::f32_bits(x) & 0x7FFFFFFFu) == 0; }
HEADROOM_HD constexpr bool is_positive(float x) {
  return !is_nan(x) && (detail::f32_bits(x) >> 31) == 0 && !is_zero(x);
}
// a > b for non-negative a, b (amaxes), NaN never greater.
HEADROOM_HD constexpr bool amax_greater(float a, float b) {
  return !is_nan(a) && detail::f32_bits(a) > detail::f32_bits(b);
}

}  // namespace fp8_detail

// Note [FP8 scale formulas]
// Transformer Engine multiplies by `scale` before the cast and keeps scale_inv = 1 / scale for the
// GEMM. Its formulas, transcribed from transformer_engine/common:
//   delayed  (recipe/delayed_scaling.cu, kernel_bulk): scale = (fp8_max * 2^-margin) / amax when
//            amax is finite and positive, else the previous scale; an inf scale becomes FLT_MAX.
//   current  (recipe/recipe_common.cuh, compute_scale_from_amax, epsilon 0): scale =
//            fp8_max / amax, 1 when amax is 0, inf or NaN; inf becomes FLT_MAX.
//   block    (the same function with force_pow_2_scales): that scale with its mantissa bits
//            cleared, the power of two at or below it.
//   mxfp8    (util/ptx.cuh float_to_e8m0, the pre-Blackwell branch): the E8M0 exponent of
//            amax * (1 / fp8_max) rounded up; the data are x * 2^(127 - e) (2^0 for e = 0).
// Every cast saturates (__NV_SATFINITE), as TE's kernels cast through __nv_fp8_e4m3 / e5m2.

// Delayed scaling's new scale from the amax its history yields.
HEADROOM_HD constexpr float delayed_scale(float amax, float previous_scale, float scaled_max) {
  float scale = fp8_detail::is_finite(amax) && fp8_detail::is_positive(amax) ? scaled_max / amax
                                                                             : previous_scale;
  if (fp8_detail::is_inf(scale)) scale = kFloat32Max;
  return scale;
}

// How delayed scaling turns its amax history into the amax of the next scale (TE's
// amax_compute_algo).
enum class AmaxComputeAlgo : uint8_t { max, most_recent };

// One delayed-scaling update of a slot (TE's kernel_bulk with one rank), in place: history[0] holds
// the amax recorded since the last update. When it is nonzero the history rolls by one (new[i] =
// old[i + 1], new[len - 1] = old[0], new[0] = 0) and `max` takes the largest of the rolled values
// (NaN ignored, as fmaxf); when it is 0 (the slot quantized nothing) nothing rolls and `max` sees
// 0, which keeps the scale. scaled_max = fp8_max * 2^-margin.
HEADROOM_HD constexpr void delayed_scaling_update(float* history, int64_t length,
                                                  AmaxComputeAlgo algo, float scaled_max,
                                                  float* scale, float* scale_inv) {
  const float last = history[0];
  float amax = 0.0f;
  if (!fp8_detail::is_zero(last)) {
    for (int64_t i = 0; i < length; ++i) {
      const float a = i < length - 1 ? history[i + 1] : last;
      if (fp8_detail::amax_greater(a, amax)) amax = a;
      history[i] = i > 0 ? a : 0.0f;
    }
  }
  if (algo == AmaxComputeAlgo::most_recent) amax = last;
  *scale = delayed_scale(amax, *scale, scaled_max);
  *scale_inv = 1.0f / *scale;
}

// Current (and, with pow2, block) scaling's scale of a tensor or block whose amax is `amax`.
HEADROOM_HD constexpr float scale_from_amax(float amax, float fp8_max, bool pow2) {
  if (fp8_detail::is_inf(amax) || fp8_detail::is_zero(amax) || fp8_detail::is_nan(amax)) {
    return 1.0f;
  }
  float scale = fp8_max / amax;
  if (fp8_detail::is_inf(scale)) scale = kFloat32Max;
  if (pow2) scale = detail::f32_from_bits(detail::f32_bits(scale) & 0xFF800000u);
  return scale;
}

// MXFP8: the E8M0 biased exponent of a 32-value block whose amax is `amax`.
HEADROOM_HD constexpr uint8_t mxfp8_block_exponent(float amax, float fp8_max) {
  const float value = amax * (1.0f / fp8_max);
  if (fp8_detail::is_nan(value)) return 0xFF;
  if (fp8_detail::is_inf(value)) return 0xFE;
  if (value == 0.0f) return 0x00;
  const uint32_t bits = detail::f32_bits(value);
  uint32_t exponent = (bits >> 23) & 0xFFu;
  const uint32_t mantissa = bits & 0x7FFFFFu;
  // Round up, short of the largest exponent, and not for a subnormal at most half the smallest.
  if (mantissa > 0 && exponent != 0xFE && !(exponent == 0 && mantissa <= 0x400000u)) ++exponent;
  return static_cast<uint8_t>(exponent);
}

// What MXFP8 multiplies a block by before the cast: 2^(127 - e), 1 for e = 0.
HEADROOM_HD constexpr float mxfp8_quantize_factor(uint8_t e) {
  return e == 0 ? 1.0f : detail::f32_from_bits(static_cast<uint32_t>(254 - e) << 23);
}

// What a dequantized MXFP8 value is multiplied by: 2^(e - 127) (e = 0 gives 2^-127, a subnormal).
HEADROOM_HD constexpr float e8m0_value(uint8_t e) {
  return e == 0 ? 0x1p-127f : detail::f32_from_bits(static_cast<uint32_t>(e) << 23);
}

// x (already multiplied by its scale) cast to FP8 with saturation, as the byte; e5m2 when
// `e5m2`, else e4m3fn.
HEADROOM_HD constexpr uint8_t fp8_saturating_bits(float scaled, bool e5m2) {
  return e5m2 ? f32_to_f8_e5m2_bits(scaled, Overflow::saturate)
              : f32_to_f8_e4m3fn_bits(scaled, Overflow::saturate);
}

HEADROOM_HD constexpr float fp8_bits_value(uint8_t bits, bool e5m2) {
  return e5m2 ? f8_e5m2_bits_to_f32(bits) : f8_e4m3fn_bits_to_f32(bits);
}

// One value quantized: its byte, and what the metrics count of it: an overflow is a finite
// scaled value beyond the format's largest (clamped), an underflow a nonzero value that became
// zero.
struct Fp8Value {
  uint8_t bits;
  bool overflow;
  bool underflow;
};

HEADROOM_HD constexpr Fp8Value fp8_quantize_value(float x, float factor, bool e5m2, float fp8_max) {
  const float scaled = x * factor;
  const uint8_t bits = fp8_saturating_bits(scaled, e5m2);
  return {bits, fp8_detail::is_finite(scaled) && (scaled > fp8_max || scaled < -fp8_max),
          x != 0.0f && (bits & 0x7Fu) == 0};
}

}  // namespace headroom
