// The e^x of the cross-entropy kernels, shared by the CPU's (backend/cpu/cross_entropy.cpp) and
// CUDA's (backend/cuda/cross_entropy.cu), so that both compute the same probabilities. A
// polynomial that vectorises on the CPU (libm's expf does not without -ffast-math), accurate to
// about 2 ulp.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HEADROOM_EXP_INLINE __host__ __device__ __forceinline__
#else
#define HEADROOM_EXP_INLINE __attribute__((always_inline)) inline
#endif

namespace headroom {

// e^x by Cody-Waite range reduction, x = n ln2 + r with |r| <= ln2 / 2, and Cephes' degree-6
// polynomial for e^r. Inputs below -87.33 give 0 rather than a subnormal: see
// Note [No subnormal probabilities] in backend/cpu/cross_entropy.cpp.
HEADROOM_EXP_INLINE float exp_approx(float input) {
  float x = input < -87.3365f ? -87.3365f : input;
  x = x > 88.7228f ? 88.7228f : x;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (no -ffast-math: not reassociated).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
#if defined(__CUDA_ARCH__)
  const float two_n = __uint_as_float(bits);
#else
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
#endif
  return input < -87.3365f ? 0.0f : e_r * two_n;
}

}  // namespace headroom
