// Scalar conversions between f32 and the narrow float formats (f16, bf16, fp8 e4m3fn and e5m2),
// bit-exact with ml_dtypes / NumPy, and the small value types kernels store them in.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace headroom {

// Note [Narrow float semantics]
// Everything here is HEADROOM_HD and table-free so that CUDA kernels reuse it verbatim and the CPU
// and the GPU produce the same bits. The reference is ml_dtypes 0.6 (bf16, fp8) and NumPy
// (float16); tests/fixtures/dtype_golden.txt holds their answers, made by
// tools/gen_dtype_golden.py.
//
// Rounding is to nearest, ties to even, subnormals included (no flush to zero). Only integer
// operations touch the bits, so the results do not depend on MXCSR or on -ftz.
//
// NaN, as the references produce it:
//   f32 -> f16   sign kept; the top 10 payload bits kept; a payload that would become 0 becomes 1
//                (so a signaling NaN stays signaling, unlike VCVTPS2PH, which quiets it).
//   f16 -> f32   sign and payload kept, not quieted. Every f16 pattern therefore round-trips.
//   f32 -> bf16  sign kept, payload dropped: always +-0x7FC0. bf16 NaN patterns other than
//                +-0x7FC0 do not round-trip (they decode with their payload, then become 0x7FC0).
//   bf16 -> f32  sign and payload kept (a 16-bit shift).
//   f32 -> fp8   e4m3fn: +-0x7F (its only NaN); e5m2: +-0x7E (ml_dtypes' quiet NaN S.11111.10).
//   fp8 -> f32   +-0x7FC00000, payload dropped.
//
// Overflow::ieee is what ml_dtypes and PyTorch do: a finite value whose rounded magnitude exceeds
// the largest finite value becomes +-inf in f16, bf16 and e5m2, and NaN (+-0x7F) in e4m3fn, which
// has no inf; inf inputs become inf (NaN in e4m3fn).
//
// Overflow::saturate is CUDA's __NV_SATFINITE (cuda_fp8.hpp, __nv_cvt_double_to_fp8): its
// overflow test `absx > FP8_OVERFLOW_THRESHOLD` also catches |x| == inf, which NaN does not reach,
// so finite overflow and +-inf both give +-max, and NaN stays NaN. This equals ml_dtypes'
// np.clip(x, -max, max).astype(...), which the golden vectors use. One difference we do not copy:
// CUDA's float path first canonicalises every NaN to 0x7FFFFFFF and so returns 0x7F for any NaN
// input in both fp8 formats (positive, and 0x7F rather than 0x7E in e5m2); we keep ml_dtypes'
// NaN bits in both modes.
enum class Overflow : uint8_t { ieee, saturate };

namespace detail {

HEADROOM_HD constexpr uint32_t f32_bits(float x) { return __builtin_bit_cast(uint32_t, x); }
HEADROOM_HD constexpr float f32_from_bits(uint32_t bits) { return __builtin_bit_cast(float, bits); }

// Rounds the magnitude of a finite f32 (its bits `abs`, sign cleared) to nearest-even in a
// format with kMantissaBits fraction bits and exponent bias kBias, and returns the encoded
// magnitude. The result may exceed the format's largest finite encoding: the caller decides what
// overflow means. A carry out of the mantissa lands in the exponent, which is the correct
// encoding, also from the largest subnormal up to the smallest normal.
template <int kMantissaBits, int kBias>
HEADROOM_HD constexpr uint32_t round_magnitude_rne(uint32_t abs) {
  constexpr int kShift = 23 - kMantissaBits;
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 - kBias + 1) << 23;
  if (abs >= kMinNormal) {
    const uint32_t rebiased = abs - (static_cast<uint32_t>(127 - kBias) << 23);
    const uint32_t odd = (rebiased >> kShift) & 1u;
    return (rebiased + (1u << (kShift - 1)) - 1u + odd) >> kShift;
  }
  // Subnormal in the target: count in units of its smallest subnormal, 2^(1 - bias - mantissa).
  // An f32 subnormal (exponent field 0) is far below half of that unit for every format here.
  const int shift = (151 - kBias - kMantissaBits) - static_cast<int>(abs >> 23);
  if (shift > 24) return 0u;  // below half a unit, or exactly half with an even (0) neighbour
  const uint32_t significand = (abs & 0x007FFFFFu) | 0x00800000u;
  const uint32_t odd = (significand >> shift) & 1u;
  return (significand + (1u << (shift - 1)) - 1u + odd) >> shift;
}

}  // namespace detail

HEADROOM_HD constexpr uint16_t f32_to_f16_bits(float x, Overflow overflow = Overflow::ieee) {
  const uint32_t bits = detail::f32_bits(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {
    const uint32_t payload = (abs >> 13) & 0x03FFu;
    return static_cast<uint16_t>(sign | 0x7C00u | (payload != 0u ? payload : 1u));
  }
  const uint32_t magnitude = detail::round_magnitude_rne<10, 15>(abs);
  if (magnitude > 0x7BFFu) {  // also every inf input
    return static_cast<uint16_t>(sign | (overflow == Overflow::saturate ? 0x7BFFu : 0x7C00u));
  }
  return static_cast<uint16_t>(sign | magnitude);
}

HEADROOM_HD constexpr float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7FFFu;
  if (magnitude >= 0x7C00u) {
    return detail::f32_from_bits(sign | 0x7F800000u | (magnitude & 0x03FFu) << 13);
  }
  if (magnitude >= 0x0400u) return detail::f32_from_bits(sign | ((magnitude << 13) + (112u << 23)));
  // Subnormal: m * 2^-24 is exact and its result is a normal f32, so no flush mode can touch it.
  const float value = static_cast<float>(magnitude) * 0x1p-24f;
  return detail::f32_from_bits(sign | detail::f32_bits(value));
}

HEADROOM_HD constexpr uint16_t f32_to_bf16_bits(float x, Overflow overflow = Overflow::ieee) {
  const uint32_t bits = detail::f32_bits(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7FC0u);
  // bf16 keeps f32's exponent, so rounding the low 16 bits away is all there is, in every range.
  uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  if (overflow == Overflow::saturate && (rounded & 0x7FFFu) == 0x7F80u) rounded -= 1u;
  return static_cast<uint16_t>(rounded);
}

HEADROOM_HD constexpr float bf16_bits_to_f32(uint16_t b) {
  return detail::f32_from_bits(static_cast<uint32_t>(b) << 16);
}

HEADROOM_HD constexpr uint8_t f32_to_f8_e4m3fn_bits(float x, Overflow overflow = Overflow::ieee) {
  const uint32_t bits = detail::f32_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  const uint32_t magnitude = detail::round_magnitude_rne<3, 7>(abs);
  // 0x7F would be NaN: values from 464 (the tie between 448 and 480, which rounds to even 448)
  // upwards overflow.
  if (magnitude > 0x7Eu) {
    return static_cast<uint8_t>(sign | (overflow == Overflow::saturate ? 0x7Eu : 0x7Fu));
  }
  return static_cast<uint8_t>(sign | magnitude);
}

HEADROOM_HD constexpr float f8_e4m3fn_bits_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t magnitude = b & 0x7Fu;
  if (magnitude == 0x7Fu) return detail::f32_from_bits(sign | 0x7FC00000u);
  if (magnitude >= 0x08u) return detail::f32_from_bits(sign | ((magnitude << 20) + (120u << 23)));
  const float value = static_cast<float>(magnitude) * 0x1p-9f;
  return detail::f32_from_bits(sign | detail::f32_bits(value));
}

HEADROOM_HD constexpr uint8_t f32_to_f8_e5m2_bits(float x, Overflow overflow = Overflow::ieee) {
  const uint32_t bits = detail::f32_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Eu);
  const uint32_t magnitude = detail::round_magnitude_rne<2, 15>(abs);
  if (magnitude > 0x7Bu) {
    return static_cast<uint8_t>(sign | (overflow == Overflow::saturate ? 0x7Bu : 0x7Cu));
  }
  return static_cast<uint8_t>(sign | magnitude);
}

HEADROOM_HD constexpr float f8_e5m2_bits_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t magnitude = b & 0x7Fu;
  if (magnitude > 0x7Cu) return detail::f32_from_bits(sign | 0x7FC00000u);
  if (magnitude == 0x7Cu) return detail::f32_from_bits(sign | 0x7F800000u);
  if (magnitude >= 0x04u) return detail::f32_from_bits(sign | ((magnitude << 21) + (112u << 23)));
  const float value = static_cast<float>(magnitude) * 0x1p-16f;
  return detail::f32_from_bits(sign | detail::f32_bits(value));
}

// Note [Stochastic rounding]
// x rounds away from zero with probability equal to the discarded fraction (the distance from x
// to the lower-magnitude neighbour over the gap between the two neighbours), so the expected result
// is x. The rule, shared by both formats: with the discarded fraction as a 32-bit fixed-point
// number F, round away iff F + random_bits >= 2^32; P = F / 2^32. For bf16 that is llm.c's rule,
// adding random bits to the 16 discarded bits and truncating (we add the high 16 bits of the
// word). For f16 normals it adds the high 13 bits to the 13 discarded bits; in f16's subnormal
// range more than 32 bits can be discarded, and there F keeps only its top 32 bits, so the
// probability is low by less than 2^-32.
// Values already representable (F = 0) never change; the only outputs are the two neighbours.
// NaN gives the RNE result's NaN, inf stays inf. Overflow to inf happens exactly where RNE
// overflows (|x| at or above max + ulp/2); between max and that threshold the result is max, so
// rounding is biased in that sliver only.

HEADROOM_HD constexpr uint16_t f32_to_bf16_bits_stochastic(float x, uint32_t random_bits) {
  const uint32_t bits = detail::f32_bits(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7FC0u);
  if (abs >= 0x7F7F8000u) return static_cast<uint16_t>(sign | 0x7F80u);
  uint32_t rounded = (bits + (random_bits >> 16)) >> 16;
  if ((rounded & 0x7FFFu) == 0x7F80u) rounded -= 1u;
  return static_cast<uint16_t>(rounded);
}

HEADROOM_HD constexpr uint16_t f32_to_f16_bits_stochastic(float x, uint32_t random_bits) {
  const uint32_t bits = detail::f32_bits(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return f32_to_f16_bits(x);
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // 65520 = max + ulp/2
  if (abs >= 0x38800000u) {                                              // 2^-14, f16's min normal
    const uint32_t rebiased = abs - (112u << 23);
    const uint32_t rounded = (rebiased + (random_bits >> 19)) >> 13;
    return static_cast<uint16_t>(sign | (rounded > 0x7BFFu ? 0x7BFFu : rounded));
  }
  // Subnormal f16: x / 2^-24 as a fixed-point number with 32 fraction bits.
  const uint32_t exponent = abs >> 23;
  const uint64_t significand = exponent != 0u ? (abs & 0x007FFFFFu) | 0x00800000u : abs;
  const int shift = 126 - static_cast<int>(exponent != 0u ? exponent : 1u);  // 14 or more
  const uint64_t fixed = shift < 56 ? (significand << 32) >> shift : 0u;
  const uint32_t fraction = static_cast<uint32_t>(fixed);
  const uint32_t carry =
      static_cast<uint32_t>((static_cast<uint64_t>(fraction) + random_bits) >> 32);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(fixed >> 32) + carry));
}

// Value types for kernels: one format's bits, converted on construction (RNE, Overflow::ieee)
// and read back as float.
struct Half {
  uint16_t bits;
  Half() = default;
  HEADROOM_HD constexpr explicit Half(float x) : bits(f32_to_f16_bits(x)) {}
  HEADROOM_HD constexpr operator float() const { return f16_bits_to_f32(bits); }
  HEADROOM_HD static constexpr Half from_bits(uint16_t b) {
    Half h{};
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  HEADROOM_HD constexpr explicit BFloat16(float x) : bits(f32_to_bf16_bits(x)) {}
  HEADROOM_HD constexpr operator float() const { return bf16_bits_to_f32(bits); }
  HEADROOM_HD static constexpr BFloat16 from_bits(uint16_t b) {
    BFloat16 v{};
    v.bits = b;
    return v;
  }
};

struct Float8E4M3 {
  uint8_t bits;
  Float8E4M3() = default;
  HEADROOM_HD constexpr explicit Float8E4M3(float x) : bits(f32_to_f8_e4m3fn_bits(x)) {}
  HEADROOM_HD constexpr operator float() const { return f8_e4m3fn_bits_to_f32(bits); }
  HEADROOM_HD static constexpr Float8E4M3 from_bits(uint8_t b) {
    Float8E4M3 v{};
    v.bits = b;
    return v;
  }
};

struct Float8E5M2 {
  uint8_t bits;
  Float8E5M2() = default;
  HEADROOM_HD constexpr explicit Float8E5M2(float x) : bits(f32_to_f8_e5m2_bits(x)) {}
  HEADROOM_HD constexpr operator float() const { return f8_e5m2_bits_to_f32(bits); }
  HEADROOM_HD static constexpr Float8E5M2 from_bits(uint8_t b) {
    Float8E5M2 v{};
    v.bits = b;
    return v;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
static_assert(sizeof(Float8E4M3) == 1 && sizeof(Float8E5M2) == 1);

}  // namespace headroom
