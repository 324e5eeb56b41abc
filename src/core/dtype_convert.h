// Bulk conversions between f32 and the floating dtypes on the CPU, with an AVX-512 path chosen at
// run time. Every path gives the bits of the scalar functions in core/float_formats.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/float_formats.h"
#include "core/philox.h"

namespace headroom {

enum class CpuIsa : uint8_t { scalar, avx512 };

// Whether this CPU (and OS) can run `isa`'s kernels. The avx512 kernels need AVX-512 F, BW and VL.
bool cpu_isa_supported(CpuIsa isa);

// The ISA the bulk conversions use by default: the best supported one, unless the environment
// variable HEADROOM_CPU_ISA names another. Read once, at the first call.
CpuIsa cpu_isa_best();

// What cpu_isa_best() returns when HEADROOM_CPU_ISA is `requested` (nullptr or "" when unset).
// Throws ValueError for a name other than scalar / avx512, or for an ISA this CPU lacks.
CpuIsa cpu_isa_choose(const char* requested);

const char* cpu_isa_name(CpuIsa isa);

// dst[i] = src[i] rounded to nearest-even into dst_dtype (f32, f16, bf16, f8_e4m3fn or f8_e5m2;
// ValueError naming any other). Overflow as in Note [Narrow float semantics]; for f32 itself,
// saturate turns +-inf into +-FLT_MAX. src and dst must not overlap; the void* side needs no
// alignment. Throws ValueError when `isa` is not supported here.
void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t n,
                      Overflow overflow = Overflow::ieee, CpuIsa isa = cpu_isa_best());

// dst[i] = src[i] widened to f32 (exact); src_dtype as for convert_from_f32.
void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t n,
                    CpuIsa isa = cpu_isa_best());

// Stochastic rounding into bf16 or f16 (see Note [Stochastic rounding]). Element i uses word
// i % 4 of philox_block(rng.seed, rng.offset + i / 4), as in Note [Philox stream layout], so a
// CUDA kernel given the same state writes the same bits; the caller advances its Generator by
// philox_blocks_for(n).
void convert_from_f32_stochastic(const float* src, void* dst, DType dst_dtype, size_t n,
                                 PhiloxState rng, CpuIsa isa = cpu_isa_best());

}  // namespace headroom
