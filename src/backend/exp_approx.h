// The one e^x of the CPU and CUDA kernels (activations, softmax, attention, cross-entropy), so
// that every kernel and both backends compute it from one copy of the constants. A polynomial
// that vectorises on the CPU (libm's expf does not without -ffast-math), with relative error
// below 2e-7 (tests/ops/test_pointwise.cpp measures it against std::exp).
//
// Note [Selects through integer masks]
// GCC does not if-convert a float comparison feeding a select of constants (`x > c ? c : x`)
// under the default -ftrapping-math unless the target has AVX-512 mask registers, so such a loop
// stays scalar on SSE2 / AVX2. Comparing the float's bits as integers cannot trap, and blending
// with and / or masks has no branch, so exp_approx (and backend/cpu/pointwise_simd.h's tanh and
// sigmoid) do every select that way.
//
// On the GPU every product and sum is an explicitly rounded intrinsic, so nvcc fuses no
// multiply-add: the CUDA kernels get the CPU's values bit for bit (the CPU's AVX-512 clones may
// fuse, Note [AVX-512 clones of point-wise loops] in backend/cpu/pointwise_simd.h).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HEADROOM_EXP_INLINE __host__ __device__ __forceinline__
#else
#define HEADROOM_EXP_INLINE __attribute__((always_inline)) inline
#endif

namespace headroom {

namespace exp_approx_detail {

HEADROOM_EXP_INLINE uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#elif defined(__CUDACC__)
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#else
  return __builtin_bit_cast(uint32_t, x);
#endif
}

HEADROOM_EXP_INLINE float float_of(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#elif defined(__CUDACC__)
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#else
  return __builtin_bit_cast(float, b);
#endif
}

// All ones when `condition` holds, else zero.
HEADROOM_EXP_INLINE uint32_t mask_if(bool condition) {
  return 0u - static_cast<uint32_t>(condition);
}

// a * b and a + b, each rounded on its own (never fused into an FMA on the GPU).
HEADROOM_EXP_INLINE float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

HEADROOM_EXP_INLINE float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

}  // namespace exp_approx_detail

// e^x with relative error below 2e-7 for x in [-87.3, 88]. Below that range (-inf included) it
// returns exactly 0, never a subnormal (Note [No subnormal probabilities] in
// backend/cpu/cross_entropy.cpp; masked attention scores); above it saturates at e^88
// (~1.65e38) instead of overflowing; NaN stays NaN. Cody-Waite range reduction, x = n ln2 + r
// with |r| <= ln2 / 2, and Cephes' degree-6 polynomial for e^r.
HEADROOM_EXP_INLINE float exp_approx(float x) {
  using namespace exp_approx_detail;
  constexpr uint32_t kHighBits = 0x42B00000u;  // 88: n below stays <= 127
  constexpr uint32_t kLowBits = 0xC2AEAC50u;   // -87.33655: n below stays >= -126
  const uint32_t b = bits_of(x);
  // Sign-magnitude bits: positive floats order as unsigned integers up to +inf (0x7F800000),
  // negative ones from 0x80000000 up to -inf (0xFF800000); NaNs lie above either end.
  const uint32_t over = mask_if(b > kHighBits) & mask_if(b <= 0x7F800000u);
  const uint32_t under = mask_if(b > kLowBits) & mask_if(b <= 0xFF800000u);
  const float xc = float_of((((b & ~over) | (kHighBits & over)) & ~under) | (kLowBits & under));
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float t = add(mul(xc, 1.44269504088896341f), kShifter);
  const int32_t n = static_cast<int32_t>(bits_of(t) - bits_of(kShifter));
  t = add(t, -kShifter);
  // ln2 in two parts, so that t * 0.693359375 is exact.
  float r = add(xc, -mul(t, 0.693359375f));
  r = add(r, -mul(t, -2.12194440e-4f));
  const float r2 = mul(r, r);
  float p = 1.9875691500e-4f;
  p = add(mul(p, r), 1.3981999507e-3f);
  p = add(mul(p, r), 8.3334519073e-3f);
  p = add(mul(p, r), 4.1665795894e-2f);
  p = add(mul(p, r), 1.6666665459e-1f);
  p = add(mul(p, r), 5.0000001201e-1f);
  p = add(add(mul(p, r2), r), 1.0f);
  const float y = mul(p, float_of(static_cast<uint32_t>(n + 127) << 23));
  return float_of(bits_of(y) & ~under);
}

}  // namespace headroom
