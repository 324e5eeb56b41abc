// AVX-512 kernels for the bulk conversions in dtype_convert.h, 16 lanes at a time. Functions carry
// __attribute__((target)) rather than the file taking -mavx512f, so the binary still runs on CPUs
// without AVX-512; dtype_convert.cpp calls them only after checking the CPU.
//
// Each kernel reproduces the scalar functions of core/float_formats.h bit for bit (the tests run
// both over the golden vectors). That rules out some instructions or needs fix-ups:
// - VCVTNEPS2BF16 (AVX512_BF16) flushes subnormal inputs and outputs to zero and keeps NaN
//   payloads, while ml_dtypes rounds subnormals and returns +-0x7FC0: not used; bf16 is integer
//   rounding, which is as fast here.
// - VCVTPS2PH rounds exactly as we do (immediate RNE, not MXCSR) but quiets NaNs (sets bit 9) where
//   NumPy keeps a signaling payload: NaN lanes are patched. VCVTPH2PS likewise quiets signaling
//   f16 NaNs: patched. Neither is affected by MXCSR.FTZ/DAZ (a test runs with both set).
// - fp8 does not go through f16: f32 -> f16 -> fp8 rounds twice and can differ from one rounding
//   at ties. fp8 rounding is integer arithmetic, plus one exact float add for subnormals.
#include "core/dtype_convert_avx512.h"

#if HEADROOM_HAVE_AVX512_KERNELS

#include <immintrin.h>

// GCC 12's intrinsics pass `__m512i __Y = __Y` as the don't-care merge operand, and inlining them
// into target-attribute functions raises false -Wmaybe-uninitialized warnings (GCC bug 105593,
// fixed in GCC 13). Nothing in this file reads an uninitialised value.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define HEADROOM_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define HEADROOM_AVX512_INLINE \
  inline __attribute__((target("avx512f,avx512bw,avx512vl"), always_inline))

namespace headroom::detail {
namespace {

HEADROOM_AVX512_INLINE __m512i splat(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }

HEADROOM_AVX512_INLINE __mmask16 tail_mask(size_t remaining) {
  return static_cast<__mmask16>((1u << remaining) - 1u);
}

HEADROOM_AVX512_INLINE void store_x16(unsigned char* dst, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v);
}
HEADROOM_AVX512_INLINE void store_x16(unsigned char* dst, __mmask16 mask, __m256i v) {
  _mm256_mask_storeu_epi16(dst, mask, v);
}
HEADROOM_AVX512_INLINE void store_x16(unsigned char* dst, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), v);
}
HEADROOM_AVX512_INLINE void store_x16(unsigned char* dst, __mmask16 mask, __m128i v) {
  _mm_mask_storeu_epi8(dst, mask, v);
}

// Vector form of detail::round_magnitude_rne. Normals as in the scalar code. For the target's
// subnormals, adding 2^k whose f32 ulp is the target's smallest subnormal makes the FPU round at
// exactly that position (nearest-even by the instruction's own rounding control, whatever MXCSR
// says), and the sum's bits minus 2^k's count the units. FTZ cannot touch the sum (it is at least
// 2^k); DAZ only zeroes f32-subnormal inputs, which round to 0 either way.
template <int kMantissaBits, int kBias>
HEADROOM_AVX512_INLINE __m512i round_magnitude_rne_x16(__m512i abs) {
  constexpr int kShift = 23 - kMantissaBits;
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 - kBias + 1) << 23;
  constexpr int kSmallestExponent = 1 - kBias - kMantissaBits;  // log2 of the smallest subnormal
  constexpr uint32_t kSubnormalBias = static_cast<uint32_t>(127 + kSmallestExponent + 23) << 23;
  const __m512i rebiased = _mm512_sub_epi32(abs, splat(static_cast<uint32_t>(127 - kBias) << 23));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(rebiased, kShift), splat(1));
  const __m512i normal = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(rebiased, splat((1u << (kShift - 1)) - 1u)), odd), kShift);
  const __m512 sum =
      _mm512_add_round_ps(_mm512_castsi512_ps(abs), _mm512_castsi512_ps(splat(kSubnormalBias)),
                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i subnormal = _mm512_sub_epi32(_mm512_castps_si512(sum), splat(kSubnormalBias));
  const __mmask16 is_normal = _mm512_cmpge_epu32_mask(abs, splat(kMinNormal));
  return _mm512_mask_blend_epi32(is_normal, subnormal, normal);
}

struct EncodeF16 {
  static constexpr size_t kCodeBytes = 2;
  template <bool kSaturate>
  HEADROOM_AVX512_INLINE static __m256i encode(__m512i bits) {
    __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(bits), _MM_FROUND_TO_NEAREST_INT);
    const __m512i abs = _mm512_and_si512(bits, splat(0x7FFFFFFFu));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, splat(0x7F800000u));
    if (nan != 0) {  // rare: keep NumPy's payload rule instead of the hardware's quiet NaN
      const __m512i payload =
          _mm512_max_epu32(_mm512_and_si512(_mm512_srli_epi32(abs, 13), splat(0x03FFu)), splat(1));
      const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 16), splat(0x8000u));
      const __m512i fixed = _mm512_or_si512(_mm512_or_si512(sign, splat(0x7C00u)), payload);
      h = _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(fixed));
    }
    if constexpr (kSaturate) {
      const __mmask16 inf = _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                                    _mm256_set1_epi16(0x7C00));
      h = _mm256_mask_sub_epi16(h, inf, h, _mm256_set1_epi16(1));
    }
    return h;
  }
};

struct EncodeBF16 {
  static constexpr size_t kCodeBytes = 2;
  template <bool kSaturate>
  HEADROOM_AVX512_INLINE static __m256i encode(__m512i bits) {
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), splat(1));
    __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, splat(0x7FFFu)), odd), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, splat(0x7FFFFFFFu)), splat(0x7F800000u));
    if (nan != 0) {  // rare
      const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 16), splat(0x8000u));
      rounded = _mm512_mask_or_epi32(rounded, nan, sign, splat(0x7FC0u));
    }
    if constexpr (kSaturate) {
      const __mmask16 inf =
          _mm512_cmpeq_epi32_mask(_mm512_and_si512(rounded, splat(0x7FFFu)), splat(0x7F80u));
      rounded = _mm512_mask_sub_epi32(rounded, inf, rounded, splat(1));
    }
    return _mm512_cvtepi32_epi16(rounded);
  }
};

// kOverflow is the ieee overflow encoding (inf, or NaN in e4m3fn); kNan is the NaN encoding.
template <int kMantissaBits, int kBias, uint32_t kMax, uint32_t kOverflow, uint32_t kNan>
struct EncodeF8 {
  static constexpr size_t kCodeBytes = 1;
  template <bool kSaturate>
  HEADROOM_AVX512_INLINE static __m128i encode(__m512i bits) {
    const __m512i abs = _mm512_and_si512(bits, splat(0x7FFFFFFFu));
    __m512i magnitude = round_magnitude_rne_x16<kMantissaBits, kBias>(abs);
    const __mmask16 overflow = _mm512_cmpgt_epu32_mask(magnitude, splat(kMax));
    magnitude = _mm512_mask_mov_epi32(magnitude, overflow, splat(kSaturate ? kMax : kOverflow));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, splat(0x7F800000u));
    magnitude = _mm512_mask_mov_epi32(magnitude, nan, splat(kNan));
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), splat(0x80u));
    return _mm512_cvtepi32_epi8(_mm512_or_si512(magnitude, sign));
  }
};

using EncodeF8E4M3 = EncodeF8<3, 7, 0x7Eu, 0x7Fu, 0x7Fu>;
using EncodeF8E5M2 = EncodeF8<2, 15, 0x7Bu, 0x7Cu, 0x7Eu>;

template <typename Encoder, bool kSaturate>
HEADROOM_AVX512_INLINE void encode_loop(const float* src, unsigned char* dst, size_t n) {
  constexpr size_t kBytes = Encoder::kCodeBytes;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // two vectors per trip: independent chains for the scheduler
    const __m512i a = _mm512_loadu_si512(src + i);
    const __m512i b = _mm512_loadu_si512(src + i + 16);
    store_x16(dst + i * kBytes, Encoder::template encode<kSaturate>(a));
    store_x16(dst + (i + 16) * kBytes, Encoder::template encode<kSaturate>(b));
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(n - i);
    const __m512i bits = _mm512_maskz_loadu_epi32(mask, src + i);
    store_x16(dst + i * kBytes, mask, Encoder::template encode<kSaturate>(bits));
  }
}

template <typename Encoder>
HEADROOM_AVX512_INLINE void encode(const float* src, void* dst, size_t n, Overflow overflow) {
  auto* out = static_cast<unsigned char*>(dst);
  if (overflow == Overflow::saturate) {
    encode_loop<Encoder, true>(src, out, n);
  } else {
    encode_loop<Encoder, false>(src, out, n);
  }
}

HEADROOM_AVX512_INLINE __m512 decode_f16_x16(__m256i h) {
  __m512 f = _mm512_cvtph_ps(h);
  const __mmask16 nan = _mm256_cmpgt_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                                _mm256_set1_epi16(0x7C00));
  if (nan != 0) {  // rare: keep signaling NaNs signaling, as NumPy does
    const __m512i wide = _mm512_cvtepu16_epi32(h);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(wide, splat(0x8000u)), 16);
    const __m512i payload = _mm512_slli_epi32(_mm512_and_si512(wide, splat(0x03FFu)), 13);
    const __m512i fixed = _mm512_or_si512(_mm512_or_si512(sign, splat(0x7F800000u)), payload);
    f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(fixed));
  }
  return f;
}

HEADROOM_AVX512_INLINE __m512 decode_bf16_x16(__m256i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// Normals by moving the fields into place; subnormals as m * 2^(1 - bias - mantissa), exact, with
// a normal f32 result. kE5M2 selects e5m2's inf and NaNs (e4m3fn has only the NaN 0x7F).
template <int kMantissaBits, int kBias, bool kE5M2>
HEADROOM_AVX512_INLINE __m512 decode_f8_x16(__m128i b) {
  const __m512i wide = _mm512_cvtepu8_epi32(b);
  const __m512i magnitude = _mm512_and_si512(wide, splat(0x7Fu));
  const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(magnitude, 23 - kMantissaBits),
                                          splat(static_cast<uint32_t>(127 - kBias) << 23));
  constexpr float kSubnormalUnit = kE5M2 ? 0x1p-16f : 0x1p-9f;
  const __m512i subnormal = _mm512_castps_si512(
      _mm512_mul_ps(_mm512_cvtepi32_ps(magnitude), _mm512_set1_ps(kSubnormalUnit)));
  const __mmask16 is_subnormal = _mm512_cmplt_epu32_mask(magnitude, splat(1u << kMantissaBits));
  __m512i bits = _mm512_mask_blend_epi32(is_subnormal, normal, subnormal);
  if constexpr (kE5M2) {
    const __mmask16 special = _mm512_cmpge_epu32_mask(magnitude, splat(0x7Cu));
    const __mmask16 inf = _mm512_cmpeq_epi32_mask(magnitude, splat(0x7Cu));
    bits = _mm512_mask_mov_epi32(bits, special, splat(0x7FC00000u));
    bits = _mm512_mask_mov_epi32(bits, inf, splat(0x7F800000u));
  } else {
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(magnitude, splat(0x7Fu));
    bits = _mm512_mask_mov_epi32(bits, nan, splat(0x7FC00000u));
  }
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(wide, splat(0x80u)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
}

// Philox4x32-10 for 16 blocks per batch, kBatches independent batches interleaved so that the
// multiplies' latency overlaps. Within a batch, lane 4 * L + q holds block
// first_block + 4 * q + L, so that a 4x4 transpose inside each 128-bit lane yields the 64 words
// in element order (see Note [Philox stream layout]): words[4 * batch + q] holds elements
// 64 * batch + 16 * q .. + 15.
template <int kBatches>
HEADROOM_AVX512_INLINE void philox_words(uint64_t seed, uint64_t first_block, __m512i* words) {
  const __m512i lane_block =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512i c0[kBatches], c1[kBatches], c2[kBatches], c3[kBatches];
  for (int b = 0; b < kBatches; ++b) {
    const uint64_t base = first_block + 16 * static_cast<uint64_t>(b);
    c0[b] = _mm512_add_epi32(splat(static_cast<uint32_t>(base)), lane_block);
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c0[b], lane_block);
    const __m512i high = splat(static_cast<uint32_t>(base >> 32));
    c1[b] = _mm512_mask_add_epi32(high, carry, high, splat(1));
    c2[b] = _mm512_setzero_si512();
    c3[b] = _mm512_setzero_si512();
  }
  uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  const __m512i mul0 = splat(0xD2511F53u), mul1 = splat(0xCD9E8D57u);
  constexpr __mmask16 kOdd = 0xAAAA;
  for (int round = 0; round < 10; ++round) {
    const __m512i k0 = splat(key0), k1 = splat(key1);
    for (int b = 0; b < kBatches; ++b) {
      // 32x32 -> 64-bit products: VPMULUDQ multiplies the even lanes; shift the odd ones down.
      const __m512i p0_even = _mm512_mul_epu32(c0[b], mul0);
      const __m512i p0_odd = _mm512_mul_epu32(_mm512_srli_epi64(c0[b], 32), mul0);
      const __m512i p1_even = _mm512_mul_epu32(c2[b], mul1);
      const __m512i p1_odd = _mm512_mul_epu32(_mm512_srli_epi64(c2[b], 32), mul1);
      const __m512i hi0 = _mm512_mask_blend_epi32(kOdd, _mm512_srli_epi64(p0_even, 32), p0_odd);
      const __m512i lo0 = _mm512_mask_blend_epi32(kOdd, p0_even, _mm512_slli_epi64(p0_odd, 32));
      const __m512i hi1 = _mm512_mask_blend_epi32(kOdd, _mm512_srli_epi64(p1_even, 32), p1_odd);
      const __m512i lo1 = _mm512_mask_blend_epi32(kOdd, p1_even, _mm512_slli_epi64(p1_odd, 32));
      c0[b] = _mm512_ternarylogic_epi32(hi1, c1[b], k0, 0x96);  // three-way xor
      c2[b] = _mm512_ternarylogic_epi32(hi0, c3[b], k1, 0x96);
      c1[b] = lo1;
      c3[b] = lo0;
    }
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  for (int b = 0; b < kBatches; ++b) {
    const __m512i w01_lo = _mm512_unpacklo_epi32(c0[b], c1[b]);
    const __m512i w01_hi = _mm512_unpackhi_epi32(c0[b], c1[b]);
    const __m512i w23_lo = _mm512_unpacklo_epi32(c2[b], c3[b]);
    const __m512i w23_hi = _mm512_unpackhi_epi32(c2[b], c3[b]);
    words[4 * b + 0] = _mm512_unpacklo_epi64(w01_lo, w23_lo);
    words[4 * b + 1] = _mm512_unpackhi_epi64(w01_lo, w23_lo);
    words[4 * b + 2] = _mm512_unpacklo_epi64(w01_hi, w23_hi);
    words[4 * b + 3] = _mm512_unpackhi_epi64(w01_hi, w23_hi);
  }
}

struct StochasticBF16 {
  HEADROOM_AVX512_INLINE static __m256i round(__m512i bits, __m512i random) {
    const __m512i abs = _mm512_and_si512(bits, splat(0x7FFFFFFFu));
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 16), splat(0x8000u));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_srli_epi32(random, 16)), 16);
    const __mmask16 past_max =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(rounded, splat(0x7FFFu)), splat(0x7F80u));
    rounded = _mm512_mask_sub_epi32(rounded, past_max, rounded, splat(1));
    const __mmask16 overflow = _mm512_cmpge_epu32_mask(abs, splat(0x7F7F8000u));
    rounded = _mm512_mask_mov_epi32(rounded, overflow, _mm512_or_si512(sign, splat(0x7F80u)));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, splat(0x7F800000u));
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(sign, splat(0x7FC0u)));
    return _mm512_cvtepi32_epi16(rounded);
  }
};

struct StochasticF16 {
  HEADROOM_AVX512_INLINE static __m256i round(__m512i bits, __m512i random) {
    const __m512i one = splat(1);
    const __m512i abs = _mm512_and_si512(bits, splat(0x7FFFFFFFu));
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 16), splat(0x8000u));

    const __m512i rebiased = _mm512_sub_epi32(abs, splat(112u << 23));
    const __m512i normal = _mm512_min_epu32(
        _mm512_srli_epi32(_mm512_add_epi32(rebiased, _mm512_srli_epi32(random, 19)), 13),
        splat(0x7BFFu));

    // Subnormal f16: integer part significand >> shift, and the discarded bits as a 32-bit
    // fraction. Variable shifts by 32 or more give 0, which is what both expressions need.
    const __m512i exponent = _mm512_srli_epi32(abs, 23);
    const __mmask16 f32_normal = _mm512_cmpneq_epi32_mask(exponent, _mm512_setzero_si512());
    const __m512i significand = _mm512_mask_or_epi32(
        abs, f32_normal, _mm512_and_si512(abs, splat(0x007FFFFFu)), splat(0x00800000u));
    const __m512i shift = _mm512_sub_epi32(splat(126), _mm512_max_epu32(exponent, one));
    __m512i subnormal = _mm512_srlv_epi32(significand, shift);
    const __m512i fraction =
        _mm512_or_si512(_mm512_sllv_epi32(significand, _mm512_sub_epi32(splat(32), shift)),
                        _mm512_srlv_epi32(significand, _mm512_sub_epi32(shift, splat(32))));
    const __mmask16 carry = _mm512_cmplt_epu32_mask(_mm512_add_epi32(fraction, random), fraction);
    subnormal = _mm512_mask_add_epi32(subnormal, carry, subnormal, one);

    const __mmask16 is_normal = _mm512_cmpge_epu32_mask(abs, splat(0x38800000u));
    __m512i magnitude = _mm512_mask_blend_epi32(is_normal, subnormal, normal);
    const __mmask16 overflow = _mm512_cmpge_epu32_mask(abs, splat(0x477FF000u));
    magnitude = _mm512_mask_mov_epi32(magnitude, overflow, splat(0x7C00u));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, splat(0x7F800000u));
    if (nan != 0) {
      const __m512i payload =
          _mm512_max_epu32(_mm512_and_si512(_mm512_srli_epi32(abs, 13), splat(0x03FFu)), one);
      magnitude = _mm512_mask_or_epi32(magnitude, nan, splat(0x7C00u), payload);
    }
    return _mm512_cvtepi32_epi16(_mm512_or_si512(magnitude, sign));
  }
};

template <typename Rounder>
HEADROOM_AVX512_INLINE void stochastic_loop(const float* src, void* dst, size_t n,
                                            PhiloxState rng) {
  constexpr int kBatches = 2;  // 128 elements per trip
  constexpr size_t kStep = 64 * kBatches;
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; i += kStep) {
    __m512i random[4 * kBatches];
    philox_words<kBatches>(rng.seed, rng.offset + i / 4, random);
    for (int q = 0; q < 4 * kBatches; ++q) {
      const size_t start = i + 16 * static_cast<size_t>(q);
      if (start >= n) break;
      if (n - start >= 16) {
        const __m512i bits = _mm512_loadu_si512(src + start);
        store_x16(out + 2 * start, Rounder::round(bits, random[q]));
      } else {
        const __mmask16 mask = tail_mask(n - start);
        const __m512i bits = _mm512_maskz_loadu_epi32(mask, src + start);
        store_x16(out + 2 * start, mask, Rounder::round(bits, random[q]));
      }
    }
  }
}

template <bool kBF16>
HEADROOM_AVX512_INLINE void decode_16bit(const void* src_bytes, float* dst, size_t n) {
  const auto* src = static_cast<const unsigned char*>(src_bytes);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
    _mm512_storeu_ps(dst + i, kBF16 ? decode_bf16_x16(h) : decode_f16_x16(h));
  }
  if (i < n) {
    const __mmask16 mask = tail_mask(n - i);
    const __m256i h = _mm256_maskz_loadu_epi16(mask, src + 2 * i);
    _mm512_mask_storeu_ps(dst + i, mask, kBF16 ? decode_bf16_x16(h) : decode_f16_x16(h));
  }
}

template <int kMantissaBits, int kBias, bool kE5M2>
HEADROOM_AVX512_INLINE void decode_f8(const void* src_bytes, float* dst, size_t n) {
  const auto* src = static_cast<const unsigned char*>(src_bytes);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm512_storeu_ps(dst + i, decode_f8_x16<kMantissaBits, kBias, kE5M2>(b));
  }
  if (i < n) {
    const __mmask16 mask = tail_mask(n - i);
    const __m128i b = _mm_maskz_loadu_epi8(mask, src + i);
    _mm512_mask_storeu_ps(dst + i, mask, decode_f8_x16<kMantissaBits, kBias, kE5M2>(b));
  }
}

}  // namespace

HEADROOM_AVX512_TARGET void f32_to_f16_avx512(const float* src, void* dst, size_t n,
                                              Overflow overflow) {
  encode<EncodeF16>(src, dst, n, overflow);
}

HEADROOM_AVX512_TARGET void f32_to_bf16_avx512(const float* src, void* dst, size_t n,
                                               Overflow overflow) {
  encode<EncodeBF16>(src, dst, n, overflow);
}

HEADROOM_AVX512_TARGET void f32_to_f8_e4m3fn_avx512(const float* src, void* dst, size_t n,
                                                    Overflow overflow) {
  encode<EncodeF8E4M3>(src, dst, n, overflow);
}

HEADROOM_AVX512_TARGET void f32_to_f8_e5m2_avx512(const float* src, void* dst, size_t n,
                                                  Overflow overflow) {
  encode<EncodeF8E5M2>(src, dst, n, overflow);
}

HEADROOM_AVX512_TARGET void f16_to_f32_avx512(const void* src, float* dst, size_t n) {
  decode_16bit<false>(src, dst, n);
}

HEADROOM_AVX512_TARGET void bf16_to_f32_avx512(const void* src, float* dst, size_t n) {
  decode_16bit<true>(src, dst, n);
}

HEADROOM_AVX512_TARGET void f8_e4m3fn_to_f32_avx512(const void* src, float* dst, size_t n) {
  decode_f8<3, 7, false>(src, dst, n);
}

HEADROOM_AVX512_TARGET void f8_e5m2_to_f32_avx512(const void* src, float* dst, size_t n) {
  decode_f8<2, 15, true>(src, dst, n);
}

HEADROOM_AVX512_TARGET void f32_to_bf16_stochastic_avx512(const float* src, void* dst, size_t n,
                                                          PhiloxState rng) {
  stochastic_loop<StochasticBF16>(src, dst, n, rng);
}

HEADROOM_AVX512_TARGET void f32_to_f16_stochastic_avx512(const float* src, void* dst, size_t n,
                                                         PhiloxState rng) {
  stochastic_loop<StochasticF16>(src, dst, n, rng);
}

}  // namespace headroom::detail

#endif  // HEADROOM_HAVE_AVX512_KERNELS
