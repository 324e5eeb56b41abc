// What the point-wise CPU kernels (activations, softmax, dropout) share: exp, tanh and sigmoid
// written so that a `#pragma omp simd` loop calling them vectorises with the default x86-64
// flags, AVX-512 clones of the hot loops, and the split of an array over threads.
//
// Every select is done through integer masks (Note [Selects through integer masks] in
// backend/exp_approx.h).
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

#include "backend/exp_approx.h"

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

// e^x: the one shared approximation of backend/exp_approx.h.
using ::headroom::exp_approx;

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
