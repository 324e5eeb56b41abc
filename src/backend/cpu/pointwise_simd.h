// What the point-wise CPU kernels (activations, softmax, dropout) share: exp, tanh and sigmoid
// written so that a `#pragma omp simd` loop calling them vectorises with the default x86-64
// flags, AVX-512 clones of the hot loops, and the split of an array over threads.
//
// Note [Selects through integer masks]
// GCC does not if-convert a float comparison feeding a select of constants (`x > c ? c : x`)
// under the default -ftrapping-math unless the target has AVX-512 mask registers, so such a loop
// stays scalar on SSE2 / AVX2. Comparing the float's bits as integers cannot trap, and blending
// with and / or masks has no branch, so these functions do every select that way.
//
// Note [AVX-512 clones of point-wise loops]
// The build sets no -march, so plain code is vectorised for SSE2 (4 floats). These kernels are
// compute-bound (a polynomial exp per element, ten Philox rounds per four elements), so a
// function marked HEADROOM_SIMD_CLONES is also compiled for AVX-512 and the loader picks that
// clone on CPUs that have it (GCC / Clang target_clones, an ifunc): the binary still runs on any
// x86-64. The AVX-512 clone may fuse a multiply and an add into one FMA where the SSE2 one rounds
// twice, so the two can differ in the last bit; each is deterministic, and both meet the accuracy
// that tests/ops/test_pointwise.cpp checks through the ops. A marked function must not contain
// an OpenMP region (the outlined region would not be cloned): the parallel loop calls it on each
// thread's range instead.
#pragma once

#include <omp.h>

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HEADROOM_SIMD_CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define HEADROOM_SIMD_CLONES
#endif

namespace headroom::cpu {

inline uint32_t bits_of(float x) { return __builtin_bit_cast(uint32_t, x); }
inline float float_of(uint32_t bits) { return __builtin_bit_cast(float, bits); }

// All ones when `condition` holds, else zero.
inline uint32_t mask_if(bool condition) { return 0u - static_cast<uint32_t>(condition); }

// mask ? a : b, for a mask from mask_if.
inline float select(uint32_t mask, float a, float b) {
  return float_of((bits_of(a) & mask) | (bits_of(b) & ~mask));
}

// e^x with relative error below 2e-7 for x in [-87.3, 88]. Below that range (-inf included) it
// returns 0; above it saturates at e^88 (~1.65e38) instead of overflowing; NaN stays NaN.
inline float exp_approx(float x) {
  constexpr uint32_t kHighBits = 0x42B00000u;  // 88: n below stays <= 127
  constexpr uint32_t kLowBits = 0xC2AEAC50u;   // -87.33655: n below stays >= -126
  const uint32_t b = bits_of(x);
  // Sign-magnitude bits: positive floats order as unsigned integers up to +inf (0x7F800000),
  // negative ones from 0x80000000 up to -inf (0xFF800000); NaNs lie above either end.
  const uint32_t over = mask_if(b > kHighBits) & mask_if(b <= 0x7F800000u);
  const uint32_t under = mask_if(b > kLowBits) & mask_if(b <= 0xFF800000u);
  const float xc = float_of((((b & ~over) | (kHighBits & over)) & ~under) | (kLowBits & under));
  // x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite split of ln2), e^r by Cephes' expf polynomial.
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float t = xc * 1.44269504088896341f + kShifter;
  const int32_t n = static_cast<int32_t>(bits_of(t) - bits_of(kShifter));
  t -= kShifter;
  float r = xc - t * 0.693359375f;
  r = r - t * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  const float y = p * float_of(static_cast<uint32_t>(n + 127) << 23);
  return float_of(bits_of(y) & ~under);
}

// tanh(x) with relative error about 1e-7 (tests/ops/test_pointwise.cpp measures it against
// std::tanh): Cephes' tanhf polynomial for |x| < 0.625, 1 - 2 / (e^{2|x|} + 1) beyond, where the
// subtraction loses nothing; from |x| = 9.01 on it gives +-1 exactly, as float tanh does.
inline float tanh_approx(float x) {
  const uint32_t sign = bits_of(x) & 0x80000000u;
  const uint32_t abs_bits = bits_of(x) & 0x7FFFFFFFu;
  constexpr uint32_t kTenBits = 0x41200000u;  // 10.0
  const uint32_t clamp = mask_if(abs_bits > kTenBits) & mask_if(abs_bits <= 0x7F800000u);
  const float a = float_of((abs_bits & ~clamp) | (kTenBits & clamp));
  const float large = float_of(bits_of(1.0f - 2.0f / (exp_approx(2.0f * a) + 1.0f)) | sign);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * (z * p);
  return select(mask_if(abs_bits < 0x3F200000u), small, large);  // |x| < 0.625
}

// 1 / (1 + e^-x); tends to exactly 0 and 1 in the tails.
inline float sigmoid_approx(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

// Calls fn(begin, end) on one contiguous range of [0, n) per thread, each range starting at a
// multiple of `align`; one call on the whole range when n <= grain.
template <typename Fn>
void parallel_ranges(int64_t n, int64_t grain, int64_t align, Fn fn) {
  if (n <= grain) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (n + threads * align - 1) / (threads * align) * align;
    const int64_t begin = t * per, end = begin + per < n ? begin + per : n;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace headroom::cpu
