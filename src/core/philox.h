// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// transforms to uniform and normal numbers. Host and device share this code, so the CPU and a
// CUDA kernel draw the same bits for the same (seed, offset).
//
// Note [Philox stream layout]
// A draw of n numbers from (seed, offset) uses the 128-bit blocks offset, offset + 1, ...,
// offset + ceil(n / 4) - 1; block b is philox(counter = {lo32(b), hi32(b), 0, 0},
// key = {lo32(seed), hi32(seed)}). Element i of the draw (in row-major order) reads word i % 4 of
// block offset + i / 4, so any element can be computed on its own, in any thread. Normal numbers
// take a Box-Muller pair per two words: element i uses the pair (i % 4) / 2 of its block and the
// cosine branch for even i, the sine branch for odd i. The Generator then advances offset by
// ceil(n / 4).
//
// Note [Bit-identical transforms]
// log, sin and cos below are our own polynomials written with explicit fmaf: glibc's logf and
// CUDA's logf differ in the last bits, ours do not. Plain multiplies never feed an add directly,
// so no compiler contraction can change a result; division and sqrt are IEEE on both sides
// (do not build the kernels with --use_fast_math).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace headroom {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in 128-bit blocks; see Note [Philox stream layout]
};

struct Philox4x32Block {
  uint32_t word[4];
};

HEADROOM_HD inline Philox4x32Block philox4x32_10(Philox4x32Block counter, uint32_t key0,
                                                 uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t* c = counter.word;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c[1] ^ key0;
    const uint32_t n2 = hi0 ^ c[3] ^ key1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// Block `index` of the stream of `seed` (see Note [Philox stream layout]).
HEADROOM_HD inline Philox4x32Block philox_block(uint64_t seed, uint64_t index) {
  Philox4x32Block counter{
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// 24 random bits -> [0, 1), exactly representable in float.
HEADROOM_HD inline float philox_uniform01(uint32_t word) {
  return static_cast<float>(word >> 8) * 5.9604644775390625e-08f;  // 2^-24
}

// ln(u) for u in (0, 1], u normal (no subnormals: our inputs are multiples of 2^-24).
HEADROOM_HD inline float philox_log(float u) {
  uint32_t bits = __builtin_bit_cast(uint32_t, u);
  int exponent = static_cast<int>(bits >> 23) - 127;
  float m = __builtin_bit_cast(float, (bits & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
  if (m > 1.41421356f) {
    m = m * 0.5f;  // exact
    exponent += 1;
  }
  const float f = m - 1.0f;  // exact (Sterbenz)
  const float s = f / (2.0f + f);
  const float s2 = s * s;
  // ln(m) = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + s^6/7 + s^8/9); |s| <= 0.1716.
  float p = fmaf(s2, 1.0f / 9.0f, 1.0f / 7.0f);
  p = fmaf(s2, p, 1.0f / 5.0f);
  p = fmaf(s2, p, 1.0f / 3.0f);
  const float tail = p * s2;
  const float two_s = 2.0f * s;
  const float log_m = fmaf(two_s, tail, two_s);
  return fmaf(static_cast<float>(exponent), 0.693147180559945f, log_m);
}

// sin and cos of a in [0, pi/2) by Taylor polynomials (error below 1e-7).
HEADROOM_HD inline void philox_sincos_quadrant(float a, float* sin_a, float* cos_a) {
  const float a2 = a * a;
  float s = fmaf(a2, 1.6059043836821613e-10f, -2.5052108385441720e-08f);
  s = fmaf(a2, s, 2.7557319223985893e-06f);
  s = fmaf(a2, s, -1.9841269841269841e-04f);
  s = fmaf(a2, s, 8.3333333333333333e-03f);
  s = fmaf(a2, s, -1.6666666666666667e-01f);
  const float s_tail = s * a2;
  *sin_a = fmaf(a, s_tail, a);
  float c = fmaf(a2, -1.1470745597729725e-11f, 2.0876756987868099e-09f);
  c = fmaf(a2, c, -2.7557319223985891e-07f);
  c = fmaf(a2, c, 2.4801587301587302e-05f);
  c = fmaf(a2, c, -1.3888888888888889e-03f);
  c = fmaf(a2, c, 4.1666666666666667e-02f);
  c = fmaf(a2, c, -0.5f);
  *cos_a = fmaf(a2, c, 1.0f);
}

// Element `i` of a uniform draw in [low, high) from (seed, offset).
HEADROOM_HD inline float philox_uniform(uint64_t seed, uint64_t offset, uint64_t i, float low,
                                        float high) {
  const Philox4x32Block block = philox_block(seed, offset + i / 4);
  float u = philox_uniform01(block.word[i % 4]);
  float value = fmaf(u, high - low, low);
  return value < high ? value : low;  // rounding may reach `high`; keep the interval half-open
}

// Element `i` of a standard normal draw from (seed, offset), by Box-Muller.
HEADROOM_HD inline float philox_standard_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  const Philox4x32Block block = philox_block(seed, offset + i / 4);
  const unsigned pair = static_cast<unsigned>(i % 4) / 2;
  const uint32_t w1 = block.word[2 * pair], w2 = block.word[2 * pair + 1];
  const float u1 = static_cast<float>((w1 >> 8) + 1u) * 5.9604644775390625e-08f;  // (0, 1]
  const float radius = sqrtf(-2.0f * philox_log(u1));
  // theta = 2 pi u2 = quadrant * pi/2 + a, from the 24 bits of u2 without rounding.
  const uint32_t k = w2 >> 8;
  const unsigned quadrant = k >> 22;
  const float a = static_cast<float>(k & 0x3FFFFFu) * 2.384185791015625e-07f * 1.57079632679489662f;
  float sin_a, cos_a;
  philox_sincos_quadrant(a, &sin_a, &cos_a);
  float sin_t, cos_t;
  switch (quadrant) {
    case 0:
      sin_t = sin_a;
      cos_t = cos_a;
      break;
    case 1:
      sin_t = cos_a;
      cos_t = -sin_a;
      break;
    case 2:
      sin_t = -sin_a;
      cos_t = -cos_a;
      break;
    default:
      sin_t = -cos_a;
      cos_t = sin_a;
      break;
  }
  return radius * ((i % 2 == 0) ? cos_t : sin_t);
}

HEADROOM_HD inline float philox_normal(uint64_t seed, uint64_t offset, uint64_t i, float mean,
                                       float std) {
  return fmaf(philox_standard_normal(seed, offset, i), std, mean);
}

// Blocks a draw of n numbers consumes.
HEADROOM_HD inline uint64_t philox_blocks_for(uint64_t n) { return (n + 3) / 4; }

}  // namespace headroom
