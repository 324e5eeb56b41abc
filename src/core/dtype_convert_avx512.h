// The AVX-512 kernels behind convert_from_f32 / convert_to_f32 (dtype_convert_avx512.cpp).
// Call them only where cpu_isa_supported(CpuIsa::avx512); each gives the scalar path's bits. The
// narrow side is a void* with no alignment required.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/float_formats.h"
#include "core/philox.h"

// The kernels exist on x86-64 with GCC or Clang (for __attribute__((target)) and
// __builtin_cpu_supports); elsewhere only the scalar path is built.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HEADROOM_HAVE_AVX512_KERNELS 1
#else
#define HEADROOM_HAVE_AVX512_KERNELS 0
#endif

#if HEADROOM_HAVE_AVX512_KERNELS
namespace headroom::detail {

void f32_to_f16_avx512(const float* src, void* dst, size_t n, Overflow overflow);
void f32_to_bf16_avx512(const float* src, void* dst, size_t n, Overflow overflow);
void f32_to_f8_e4m3fn_avx512(const float* src, void* dst, size_t n, Overflow overflow);
void f32_to_f8_e5m2_avx512(const float* src, void* dst, size_t n, Overflow overflow);

void f16_to_f32_avx512(const void* src, float* dst, size_t n);
void bf16_to_f32_avx512(const void* src, float* dst, size_t n);
void f8_e4m3fn_to_f32_avx512(const void* src, float* dst, size_t n);
void f8_e5m2_to_f32_avx512(const void* src, float* dst, size_t n);

void f32_to_bf16_stochastic_avx512(const float* src, void* dst, size_t n, PhiloxState rng);
void f32_to_f16_stochastic_avx512(const float* src, void* dst, size_t n, PhiloxState rng);

}  // namespace headroom::detail
#endif
