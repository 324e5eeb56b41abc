// Bulk f32 <-> floating-dtype conversions: CPU feature detection, the scalar loops (the fallback
// and the oracle for the vector kernels) and the dispatch between them.
#include "core/dtype_convert.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "core/dtype_convert_avx512.h"
#include "core/error.h"

namespace headroom {
namespace {

bool detect_avx512() {
#if HEADROOM_HAVE_AVX512_KERNELS
  // libgcc also checks (XGETBV) that the OS saves the zmm and mask registers.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

void check_isa(CpuIsa isa, const char* function) {
  if (!cpu_isa_supported(isa)) {
    throw ValueError(str_cat(function, ": CPU ISA ", cpu_isa_name(isa),
                             " is not supported by this CPU (AVX-512 F/BW/VL required)"));
  }
}

[[noreturn]] void throw_not_floating(const char* function, const char* argument, DType dtype) {
  std::string floating;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DTypeTraits& t = dtype_traits(static_cast<DType>(i));
    if (t.is_floating) floating += str_cat(floating.empty() ? "" : ", ", t.name);
  }
  throw ValueError(str_cat(function, ": ", argument, " ", dtype_name(dtype),
                           " is not a floating dtype (expected one of ", floating, ")"));
}

// The narrow side is a void* with no alignment promised, hence memcpy (a plain move once compiled).
template <typename Out, Out (*kEncode)(float, Overflow)>
void encode_scalar(const float* src, void* dst, size_t n, Overflow overflow) {
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) {
    const Out code = kEncode(src[i], overflow);
    std::memcpy(out + i * sizeof(Out), &code, sizeof(Out));
  }
}

template <typename In, float (*kDecode)(In)>
void decode_scalar(const void* src, float* dst, size_t n) {
  const auto* in = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; ++i) {
    In code;
    std::memcpy(&code, in + i * sizeof(In), sizeof(In));
    dst[i] = kDecode(code);
  }
}

void copy_f32(const float* src, float* dst, size_t n, Overflow overflow) {
  if (n == 0) return;
  if (overflow == Overflow::ieee) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  constexpr float kMax = std::numeric_limits<float>::max();
  for (size_t i = 0; i < n; ++i) {
    const float x = src[i];
    dst[i] = x > kMax ? kMax : (x < -kMax ? -kMax : x);  // NaN compares false and passes through
  }
}

template <uint16_t (*kRound)(float, uint32_t)>
void stochastic_scalar(const float* src, void* dst, size_t n, PhiloxState rng) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t i = 0;
  for (uint64_t block = 0; i < n; ++block) {
    const Philox4x32Block random = philox_block(rng.seed, rng.offset + block);
    for (int word = 0; word < 4 && i < n; ++word, ++i) {
      const uint16_t code = kRound(src[i], random.word[word]);
      std::memcpy(out + 2 * i, &code, 2);
    }
  }
}

}  // namespace

bool cpu_isa_supported(CpuIsa isa) {
  static const bool avx512 = detect_avx512();
  switch (isa) {
    case CpuIsa::scalar:
      return true;
    case CpuIsa::avx512:
      return avx512;
  }
  return false;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return "scalar";
    case CpuIsa::avx512:
      return "avx512";
  }
  return "unknown";
}

CpuIsa cpu_isa_choose(const char* requested) {
  if (requested == nullptr || *requested == '\0') {
    return cpu_isa_supported(CpuIsa::avx512) ? CpuIsa::avx512 : CpuIsa::scalar;
  }
  const std::string_view name(requested);
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx512}) {
    if (name != cpu_isa_name(isa)) continue;
    if (!cpu_isa_supported(isa)) {
      throw ValueError(
          str_cat("HEADROOM_CPU_ISA=", name, " but this CPU lacks it (AVX-512 F/BW/VL required)"));
    }
    return isa;
  }
  throw ValueError(
      str_cat("HEADROOM_CPU_ISA='", name, "' is not a CPU ISA: expected scalar or avx512"));
}

CpuIsa cpu_isa_best() {
  static const CpuIsa best = cpu_isa_choose(std::getenv("HEADROOM_CPU_ISA"));
  return best;
}

void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t n, Overflow overflow,
                      CpuIsa isa) {
  check_isa(isa, "convert_from_f32");
#if HEADROOM_HAVE_AVX512_KERNELS
  if (isa == CpuIsa::avx512) {
    switch (dst_dtype) {
      case DType::f16:
        return detail::f32_to_f16_avx512(src, dst, n, overflow);
      case DType::bf16:
        return detail::f32_to_bf16_avx512(src, dst, n, overflow);
      case DType::f8_e4m3fn:
        return detail::f32_to_f8_e4m3fn_avx512(src, dst, n, overflow);
      case DType::f8_e5m2:
        return detail::f32_to_f8_e5m2_avx512(src, dst, n, overflow);
      default:
        break;  // f32 is a copy on every ISA; the rest fail below
    }
  }
#endif
  switch (dst_dtype) {
    case DType::f32:
      return copy_f32(src, static_cast<float*>(dst), n, overflow);
    case DType::f16:
      return encode_scalar<uint16_t, f32_to_f16_bits>(src, dst, n, overflow);
    case DType::bf16:
      return encode_scalar<uint16_t, f32_to_bf16_bits>(src, dst, n, overflow);
    case DType::f8_e4m3fn:
      return encode_scalar<uint8_t, f32_to_f8_e4m3fn_bits>(src, dst, n, overflow);
    case DType::f8_e5m2:
      return encode_scalar<uint8_t, f32_to_f8_e5m2_bits>(src, dst, n, overflow);
    default:
      throw_not_floating("convert_from_f32", "dst_dtype", dst_dtype);
  }
}

void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t n, CpuIsa isa) {
  check_isa(isa, "convert_to_f32");
#if HEADROOM_HAVE_AVX512_KERNELS
  if (isa == CpuIsa::avx512) {
    switch (src_dtype) {
      case DType::f16:
        return detail::f16_to_f32_avx512(src, dst, n);
      case DType::bf16:
        return detail::bf16_to_f32_avx512(src, dst, n);
      case DType::f8_e4m3fn:
        return detail::f8_e4m3fn_to_f32_avx512(src, dst, n);
      case DType::f8_e5m2:
        return detail::f8_e5m2_to_f32_avx512(src, dst, n);
      default:
        break;
    }
  }
#endif
  switch (src_dtype) {
    case DType::f32:
      return copy_f32(static_cast<const float*>(src), dst, n, Overflow::ieee);
    case DType::f16:
      return decode_scalar<uint16_t, f16_bits_to_f32>(src, dst, n);
    case DType::bf16:
      return decode_scalar<uint16_t, bf16_bits_to_f32>(src, dst, n);
    case DType::f8_e4m3fn:
      return decode_scalar<uint8_t, f8_e4m3fn_bits_to_f32>(src, dst, n);
    case DType::f8_e5m2:
      return decode_scalar<uint8_t, f8_e5m2_bits_to_f32>(src, dst, n);
    default:
      throw_not_floating("convert_to_f32", "src_dtype", src_dtype);
  }
}

void convert_from_f32_stochastic(const float* src, void* dst, DType dst_dtype, size_t n,
                                 PhiloxState rng, CpuIsa isa) {
  check_isa(isa, "convert_from_f32_stochastic");
  if (dst_dtype != DType::bf16 && dst_dtype != DType::f16) {
    throw ValueError(str_cat("convert_from_f32_stochastic: dst_dtype ", dtype_name(dst_dtype),
                             " is not supported (expected bf16 or f16)"));
  }
#if HEADROOM_HAVE_AVX512_KERNELS
  if (isa == CpuIsa::avx512) {
    if (dst_dtype == DType::bf16) return detail::f32_to_bf16_stochastic_avx512(src, dst, n, rng);
    return detail::f32_to_f16_stochastic_avx512(src, dst, n, rng);
  }
#endif
  if (dst_dtype == DType::bf16) {
    return stochastic_scalar<f32_to_bf16_bits_stochastic>(src, dst, n, rng);
  }
  return stochastic_scalar<f32_to_f16_bits_stochastic>(src, dst, n, rng);
}

}  // namespace headroom
