// The bulk conversion API of core/dtype_convert.h: ISA selection, errors, odd lengths and
// alignments, the FP environment, and stochastic rounding's use of the Philox stream. Bit-exactness
// against ml_dtypes over a million inputs is in test_dtype_golden.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "core/dtype_convert.h"
#include "core/error.h"
#include "core/float_formats.h"
#include "core/philox.h"

namespace headroom {
namespace {

const DType kNarrow[] = {DType::f16, DType::bf16, DType::f8_e4m3fn, DType::f8_e5m2};

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas = {CpuIsa::scalar};
  if (cpu_isa_supported(CpuIsa::avx512)) isas.push_back(CpuIsa::avx512);
  return isas;
}

float f32(uint32_t bits) { return detail::f32_from_bits(bits); }

uint32_t encode_one(DType dtype, float x, Overflow overflow) {
  switch (dtype) {
    case DType::f16:
      return f32_to_f16_bits(x, overflow);
    case DType::bf16:
      return f32_to_bf16_bits(x, overflow);
    case DType::f8_e4m3fn:
      return f32_to_f8_e4m3fn_bits(x, overflow);
    case DType::f8_e5m2:
      return f32_to_f8_e5m2_bits(x, overflow);
    default:
      throw std::logic_error("not a narrow float");
  }
}

uint32_t decode_one(DType dtype, uint32_t code) {
  switch (dtype) {
    case DType::f16:
      return detail::f32_bits(f16_bits_to_f32(static_cast<uint16_t>(code)));
    case DType::bf16:
      return detail::f32_bits(bf16_bits_to_f32(static_cast<uint16_t>(code)));
    case DType::f8_e4m3fn:
      return detail::f32_bits(f8_e4m3fn_bits_to_f32(static_cast<uint8_t>(code)));
    case DType::f8_e5m2:
      return detail::f32_bits(f8_e5m2_bits_to_f32(static_cast<uint8_t>(code)));
    default:
      throw std::logic_error("not a narrow float");
  }
}

// Inputs that exercise every branch: each f16 and bf16 value and its f32 neighbours (subnormal
// ranges, ties, overflow edges, NaN payloads, f32 subnormals).
std::vector<float> branchy_inputs() {
  std::vector<float> v;
  for (uint32_t c = 0; c < 65536; c += 3) {
    for (uint32_t b : {detail::f32_bits(f16_bits_to_f32(static_cast<uint16_t>(c))), c << 16}) {
      for (uint32_t d : {0u, 1u, 0xFFFFFFFFu}) v.push_back(f32(b + d));
    }
  }
  return v;
}

TEST(CpuIsa, ChoosesFromTheEnvironmentValue) {
  const CpuIsa best = cpu_isa_supported(CpuIsa::avx512) ? CpuIsa::avx512 : CpuIsa::scalar;
  EXPECT_EQ(cpu_isa_choose(nullptr), best);
  EXPECT_EQ(cpu_isa_choose(""), best);
  EXPECT_EQ(cpu_isa_choose("scalar"), CpuIsa::scalar);
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::scalar));
  EXPECT_STREQ(cpu_isa_name(CpuIsa::avx512), "avx512");
  try {
    cpu_isa_choose("avx2");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("HEADROOM_CPU_ISA='avx2'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected scalar or avx512"), std::string::npos)
        << e.what();
  }
  if (cpu_isa_supported(CpuIsa::avx512)) {
    EXPECT_EQ(cpu_isa_choose("avx512"), CpuIsa::avx512);
  } else {
    EXPECT_THROW(cpu_isa_choose("avx512"), ValueError);
    float x = 1.0f;
    uint16_t y;
    EXPECT_THROW(convert_from_f32(&x, &y, DType::bf16, 1, Overflow::ieee, CpuIsa::avx512),
                 ValueError);
  }
  // cpu_isa_best() is cpu_isa_choose of the environment, a bad value included.
  const char* env = std::getenv("HEADROOM_CPU_ISA");
  bool env_valid = true;
  try {
    cpu_isa_choose(env);
  } catch (const ValueError&) {
    env_valid = false;
  }
  if (env_valid) {
    EXPECT_EQ(cpu_isa_best(), cpu_isa_choose(env));
  } else {
    EXPECT_THROW(cpu_isa_best(), ValueError);
  }
}

TEST(DTypeConvert, RejectsNonFloatingDTypes) {
  float x[2] = {1.0f, 2.0f};
  int32_t out[2];
  try {
    convert_from_f32(x, out, DType::i32, 2);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "convert_from_f32: dst_dtype i32 is not a floating dtype (expected one of f32, "
                 "f16, bf16, f8_e4m3fn, f8_e5m2)");
  }
  EXPECT_THROW(convert_to_f32(out, DType::boolean, x, 2), ValueError);
  try {
    convert_from_f32_stochastic(x, out, DType::f8_e4m3fn, 2, PhiloxState{1, 0});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("f8_e4m3fn"), std::string::npos) << e.what();
  }
}

TEST(DTypeConvert, F32ToF32) {
  const float inf = std::numeric_limits<float>::infinity();
  const float src[] = {1.0f, -inf, inf, f32(0xFFC00001), -0.0f};
  for (CpuIsa isa : supported_isas()) {
    float dst[5];
    convert_from_f32(src, dst, DType::f32, 5, Overflow::ieee, isa);
    EXPECT_EQ(std::memcmp(src, dst, sizeof src), 0);
    convert_from_f32(src, dst, DType::f32, 5, Overflow::saturate, isa);
    EXPECT_EQ(dst[1], -std::numeric_limits<float>::max());
    EXPECT_EQ(dst[2], std::numeric_limits<float>::max());
    EXPECT_EQ(detail::f32_bits(dst[3]), 0xFFC00001u);
    convert_to_f32(src, DType::f32, dst, 5, isa);
    EXPECT_EQ(std::memcmp(src, dst, sizeof src), 0);
  }
  convert_from_f32(nullptr, nullptr, DType::f32, 0);  // nothing to do, nothing touched
}

// Every length from 0 to 70 at misaligned addresses: vector bodies, masked tails, and no
// writes past the end.
TEST(DTypeConvert, AllLengthsAndAlignments) {
  const std::vector<float> inputs = branchy_inputs();
  for (CpuIsa isa : supported_isas()) {
    for (DType dtype : kNarrow) {
      const size_t size = dtype_size(dtype);
      for (size_t n = 0; n <= 70; ++n) {
        std::vector<float> src(n + 1);
        std::memcpy(src.data() + 1, inputs.data() + 1000 * n, n * sizeof(float));
        std::vector<uint8_t> dst((n + 2) * size + 1, 0xAB);
        convert_from_f32(src.data() + 1, dst.data() + 1, dtype, n, Overflow::ieee, isa);
        for (size_t i = 0; i < n; ++i) {
          uint32_t code = 0;
          std::memcpy(&code, dst.data() + 1 + i * size, size);
          ASSERT_EQ(code, encode_one(dtype, src[i + 1], Overflow::ieee))
              << dtype_name(dtype) << " n=" << n << " i=" << i << " " << cpu_isa_name(isa);
        }
        EXPECT_EQ(dst[0], 0xAB);
        for (size_t b = 1 + n * size; b < dst.size(); ++b) ASSERT_EQ(dst[b], 0xAB) << n;

        std::vector<float> back(n + 2, -7.0f);
        convert_to_f32(dst.data() + 1, dtype, back.data() + 1, n, isa);
        for (size_t i = 0; i < n; ++i) {
          uint32_t code = 0;
          std::memcpy(&code, dst.data() + 1 + i * size, size);
          ASSERT_EQ(detail::f32_bits(back[i + 1]), decode_one(dtype, code)) << dtype_name(dtype);
        }
        EXPECT_EQ(back[0], -7.0f);
        EXPECT_EQ(back[n + 1], -7.0f);
      }
    }
  }
}

#if defined(__x86_64__)
// Training code often sets flush-to-zero and denormals-are-zero for speed. Neither may change a
// conversion: the scalar code is integer-only, and the vector instructions used either ignore
// MXCSR's FTZ/DAZ or only see inputs where they make no difference.
TEST(DTypeConvert, IgnoresFlushToZeroAndDenormalsAreZero) {
  const std::vector<float> inputs = branchy_inputs();
  const size_t n = inputs.size();
  std::vector<std::vector<uint8_t>> expected_codes;
  std::vector<std::vector<float>> expected_back;
  for (DType dtype : kNarrow) {
    std::vector<uint8_t> codes(n * dtype_size(dtype));
    for (Overflow o : {Overflow::ieee, Overflow::saturate}) {
      convert_from_f32(inputs.data(), codes.data(), dtype, n, o, CpuIsa::scalar);
      expected_codes.push_back(codes);
    }
    std::vector<float> back(n);
    convert_to_f32(codes.data(), dtype, back.data(), n, CpuIsa::scalar);
    expected_back.push_back(back);
  }
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
  std::vector<std::string> failures;
  for (CpuIsa isa : supported_isas()) {
    size_t k = 0, j = 0;
    for (DType dtype : kNarrow) {
      std::vector<uint8_t> codes(n * dtype_size(dtype));
      for (Overflow o : {Overflow::ieee, Overflow::saturate}) {
        convert_from_f32(inputs.data(), codes.data(), dtype, n, o, isa);
        if (codes != expected_codes[k++])
          failures.push_back(str_cat("encode ", dtype_name(dtype), " ", cpu_isa_name(isa)));
      }
      std::vector<float> back(n);
      convert_to_f32(codes.data(), dtype, back.data(), n, isa);
      if (std::memcmp(back.data(), expected_back[j++].data(), n * sizeof(float)) != 0) {
        failures.push_back(str_cat("decode ", dtype_name(dtype), " ", cpu_isa_name(isa)));
      }
    }
  }
  _mm_setcsr(saved);
  EXPECT_TRUE(failures.empty()) << "differs under FTZ/DAZ: " << failures.front();
}
#endif

// Element i uses word i % 4 of block offset + i / 4 (Note [Philox stream layout]); the vector
// path must pick the same word for every element, also where the block counter crosses 2^32.
TEST(DTypeConvert, StochasticFollowsThePhiloxLayout) {
  const std::vector<float> inputs = branchy_inputs();
  for (PhiloxState rng : {PhiloxState{0x0123456789ABCDEFull, 0}, PhiloxState{42, 0xFFFFFFF5ull},
                          PhiloxState{~0ull, 7}}) {
    for (DType dtype : {DType::bf16, DType::f16}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000},
                       inputs.size()}) {
        std::vector<uint16_t> expected(n);
        for (size_t i = 0; i < n; ++i) {
          const uint32_t word = philox_block(rng.seed, rng.offset + i / 4).word[i % 4];
          expected[i] = dtype == DType::bf16 ? f32_to_bf16_bits_stochastic(inputs[i], word)
                                             : f32_to_f16_bits_stochastic(inputs[i], word);
        }
        for (CpuIsa isa : supported_isas()) {
          std::vector<uint16_t> out(n + 1, 0xABCD);
          convert_from_f32_stochastic(inputs.data(), out.data(), dtype, n, rng, isa);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(out[i], expected[i]) << dtype_name(dtype) << " " << cpu_isa_name(isa)
                                           << " n=" << n << " i=" << i << " offset=" << rng.offset;
          }
          EXPECT_EQ(out[n], 0xABCD);
        }
      }
    }
  }
}

TEST(DTypeConvert, StochasticIsUnbiasedInBulk) {
  // One value repeated: the bulk mean over 2^16 elements equals it (1 + 2^-10 lies 1/8 of the
  // way from 1 to the next bf16, 1 + 2^-7).
  const size_t n = 1 << 16;
  const std::vector<float> src(n, 1.0f + 0x1p-10f);
  for (CpuIsa isa : supported_isas()) {
    std::vector<uint16_t> out(n);
    convert_from_f32_stochastic(src.data(), out.data(), DType::bf16, n, PhiloxState{5, 0}, isa);
    double sum = 0;
    for (uint16_t b : out) sum += bf16_bits_to_f32(b);
    EXPECT_NEAR(sum / n, 1.0 + 0x1p-10, 6 * 0x1p-7 * 0.5 / 256);
  }
}

}  // namespace
}  // namespace headroom
