// The scalar conversions of core/float_formats.h case by case (the bulk comparison with ml_dtypes
// is in test_dtype_golden.cpp), stochastic rounding, the value types and dtype dispatch.
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dtype_dispatch.h"
#include "core/float_formats.h"
#include "core/philox.h"

namespace headroom {
namespace {

float f32(uint32_t bits) { return detail::f32_from_bits(bits); }
uint32_t bits(float x) { return detail::f32_bits(x); }
constexpr float kInf = std::numeric_limits<float>::infinity();

// Usable in constant expressions, as kernels' compile-time constants may need.
static_assert(f32_to_bf16_bits(1.0f) == 0x3F80);
static_assert(f32_to_f16_bits(-2.0f) == 0xC000);
static_assert(f8_e4m3fn_bits_to_f32(0x7E) == 448.0f);
static_assert(Float8E5M2(57344.0f).bits == 0x7B);

TEST(FloatFormats, F16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(1.0f + 0x1p-11f), 0x3C00);                 // tie, even stays
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * 0x1p-11f), 0x3C02);             // tie, odd rounds up
  EXPECT_EQ(f32_to_f16_bits(f32(bits(1.0f + 0x1p-11f) + 1)), 0x3C01);  // just above the tie
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_bits(65519.996f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7C00);  // max + ulp/2 ties to the even "next", inf
  EXPECT_EQ(f32_to_f16_bits(-kInf), 0xFC00);
}

TEST(FloatFormats, F16Subnormals) {
  EXPECT_EQ(f32_to_f16_bits(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(0x1p-25f), 0x0000);  // tie with 0: even
  EXPECT_EQ(f32_to_f16_bits(f32(bits(0x1p-25f) + 1)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(3 * 0x1p-25f), 0x0002);          // 1.5 units: tie, even 2
  EXPECT_EQ(f32_to_f16_bits(-0x1p-14f + 0x1p-26f), 0x8400);  // rounds up into the min normal
  EXPECT_EQ(f32_to_f16_bits(f32(1)), 0x0000);                // f32 subnormal
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f16_bits_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_bits_to_f32(0x83FF), -1023 * 0x1p-24f);
}

TEST(FloatFormats, F16NaNKeepsPayloadLikeNumPy) {
  EXPECT_EQ(f32_to_f16_bits(f32(0x7F800001)), 0x7C01);  // payload truncates to 0: becomes 1
  EXPECT_EQ(f32_to_f16_bits(f32(0xFFC00000)), 0xFE00);
  EXPECT_EQ(f32_to_f16_bits(f32(0x7FA02000)), 0x7D01);
  EXPECT_EQ(bits(f16_bits_to_f32(0x7C01)), 0x7F802000u);  // signaling stays signaling
  EXPECT_EQ(bits(f16_bits_to_f32(0xFE00)), 0xFFC00000u);
}

TEST(FloatFormats, Bf16) {
  EXPECT_EQ(f32_to_bf16_bits(f32(0x3F808000)), 0x3F80);  // tie, even
  EXPECT_EQ(f32_to_bf16_bits(f32(0x3F818000)), 0x3F82);  // tie, odd up
  EXPECT_EQ(f32_to_bf16_bits(f32(0x3F808001)), 0x3F81);
  EXPECT_EQ(f32_to_bf16_bits(f32(0x00008000)), 0x0000);  // subnormal tie, not flushed
  EXPECT_EQ(f32_to_bf16_bits(f32(0x00018000)), 0x0002);
  EXPECT_EQ(f32_to_bf16_bits(f32(0x807FFFFF)), 0x8080);  // largest subnormal up to min normal
  EXPECT_EQ(f32_to_bf16_bits(f32(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(f32_to_bf16_bits(f32(0x7F7F8000)), 0x7F80);  // overflow
  EXPECT_EQ(f32_to_bf16_bits(f32(0x7F7F8000), Overflow::saturate), 0x7F7F);
  EXPECT_EQ(f32_to_bf16_bits(-kInf, Overflow::saturate), 0xFF7F);
  EXPECT_EQ(f32_to_bf16_bits(f32(0xFFA00000)), 0xFFC0);  // NaN: canonical, sign kept
  EXPECT_EQ(f32_to_bf16_bits(f32(0x7F800001), Overflow::saturate), 0x7FC0);
  EXPECT_EQ(bits(bf16_bits_to_f32(0xFF81)), 0xFF810000u);
}

TEST(FloatFormats, F8E4M3fn) {
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(448.0f), 0x7E);
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(464.0f), 0x7E);  // tie between 448 and (absent) 480: even
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(f32(bits(464.0f) + 1)), 0x7F);  // NaN: e4m3fn has no inf
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(-1e9f), 0xFF);
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(kInf), 0x7F);
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(-1e9f, Overflow::saturate), 0xFE);
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(kInf, Overflow::saturate), 0x7E);             // CUDA: inf -> max
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(f32(0xFFC00000), Overflow::saturate), 0xFF);  // NaN stays
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(0x1p-9f), 0x01);
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(0x1p-10f), 0x00);
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(f32_to_f8_e4m3fn_bits(0.0f - 0x1p-20f), 0x80);
  EXPECT_EQ(f8_e4m3fn_bits_to_f32(0x78), 256.0f);  // the exponent-all-ones code is finite
  EXPECT_EQ(bits(f8_e4m3fn_bits_to_f32(0xFF)), 0xFFC00000u);
  EXPECT_EQ(f8_e4m3fn_bits_to_f32(0x87), -7 * 0x1p-9f);
}

TEST(FloatFormats, F8E5M2) {
  EXPECT_EQ(f32_to_f8_e5m2_bits(57344.0f), 0x7B);
  EXPECT_EQ(f32_to_f8_e5m2_bits(61439.996f), 0x7B);
  EXPECT_EQ(f32_to_f8_e5m2_bits(61440.0f), 0x7C);  // max + ulp/2 ties away from odd max: inf
  EXPECT_EQ(f32_to_f8_e5m2_bits(61440.0f, Overflow::saturate), 0x7B);
  EXPECT_EQ(f32_to_f8_e5m2_bits(-kInf), 0xFC);
  EXPECT_EQ(f32_to_f8_e5m2_bits(-kInf, Overflow::saturate), 0xFB);
  EXPECT_EQ(f32_to_f8_e5m2_bits(f32(0x7F800001)), 0x7E);
  EXPECT_EQ(f32_to_f8_e5m2_bits(f32(0xFFFFFFFF), Overflow::saturate), 0xFE);
  EXPECT_EQ(f32_to_f8_e5m2_bits(0x1p-16f), 0x01);
  EXPECT_EQ(f32_to_f8_e5m2_bits(0x1p-17f), 0x00);
  EXPECT_EQ(f8_e5m2_bits_to_f32(0xFC), -kInf);
  EXPECT_EQ(bits(f8_e5m2_bits_to_f32(0x7D)), 0x7FC00000u);
  EXPECT_EQ(f8_e5m2_bits_to_f32(0x03), 3 * 0x1p-16f);
}

// Decoding then encoding: every f16 pattern comes back (NaN payloads included); bf16 patterns
// too, except NaNs other than +-0x7FC0, which become those two. Same as ml_dtypes / NumPy
// (tools/gen_dtype_golden.py asserts it on their side).
TEST(FloatFormats, SixteenBitRoundTrips) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<uint16_t>(c);
    ASSERT_EQ(f32_to_f16_bits(f16_bits_to_f32(code)), code) << std::hex << c;
    const bool nan = (c & 0x7FFF) > 0x7F80;
    const uint16_t expected = nan ? static_cast<uint16_t>((c & 0x8000) | 0x7FC0) : code;
    ASSERT_EQ(f32_to_bf16_bits(bf16_bits_to_f32(code)), expected) << std::hex << c;
  }
}

TEST(FloatFormats, ValueTypes) {
  const Half h(1.5f);
  EXPECT_EQ(h.bits, 0x3E00);
  EXPECT_EQ(static_cast<float>(h), 1.5f);
  EXPECT_EQ(Half::from_bits(0x7BFF), 65504.0f);
  EXPECT_EQ(BFloat16(3.0f).bits, 0x4040);
  EXPECT_EQ(BFloat16::from_bits(0xBF80) + 0.5f, -0.5f);  // implicit operator float
  EXPECT_EQ(Float8E4M3(-448.0f).bits, 0xFE);
  EXPECT_TRUE(std::isnan(static_cast<float>(Float8E4M3(1000.0f))));  // RNE, ieee overflow
  EXPECT_EQ(Float8E5M2::from_bits(0x3C), 1.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Float8E5M2(1e6f))));
  static_assert(std::is_trivially_copyable_v<Half> && std::is_trivially_copyable_v<Float8E5M2>);
}

// Stochastic rounding (Note [Stochastic rounding]).

// The codes of the representable neighbours below and above |x| (equal when x is representable).
template <typename Encode, typename Decode>
std::pair<uint32_t, uint32_t> neighbours(float x, Encode encode, Decode decode) {
  const uint32_t nearest = encode(x);
  const float y = decode(nearest);
  if (std::fabs(y) == std::fabs(x)) return {nearest, nearest};
  if (std::fabs(y) > std::fabs(x)) return {nearest - 1, nearest};
  return {nearest, nearest + 1};
}

std::vector<float> stochastic_probe_values() {
  std::vector<float> v;
  for (uint32_t i = 0; i < 4096; ++i) {
    const Philox4x32Block r = philox_block(7, i);
    v.push_back(f32(r.word[0]));  // any bit pattern
    // and values spread over f16's normal and subnormal ranges
    v.push_back(std::ldexp(1.0f + static_cast<float>(r.word[1] >> 9) * 0x1p-23f,
                           static_cast<int>(r.word[2] % 48) - 40) *
                (r.word[3] & 1 ? -1.0f : 1.0f));
  }
  return v;
}

TEST(StochasticRounding, RepresentableValuesNeverChange) {
  const uint32_t words[] = {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu, 0x12345678u};
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<uint16_t>(c);
    const bool bf16_nan = (c & 0x7FFF) > 0x7F80;
    for (uint32_t w : words) {
      ASSERT_EQ(f32_to_f16_bits_stochastic(f16_bits_to_f32(code), w), code) << std::hex << c;
      if (!bf16_nan) {
        ASSERT_EQ(f32_to_bf16_bits_stochastic(bf16_bits_to_f32(code), w), code) << std::hex << c;
      }
    }
  }
}

// The neighbour search below does float arithmetic on subnormals, which the ops' flush-to-zero
// (backend/cpu/denormals.h) would turn into zeros if an op ran earlier on this thread.
class KeepDenormals {
 public:
  KeepDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~0x8040u); }
  ~KeepDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
};

TEST(StochasticRounding, OnlyTheTwoNeighbours) {
  KeepDenormals keep_denormals;
  auto bf16 = [](float x) -> uint32_t { return f32_to_bf16_bits(x); };
  auto bf16_back = [](uint32_t c) { return bf16_bits_to_f32(static_cast<uint16_t>(c)); };
  auto f16 = [](float x) -> uint32_t { return f32_to_f16_bits(x); };
  auto f16_back = [](uint32_t c) { return f16_bits_to_f32(static_cast<uint16_t>(c)); };
  uint64_t block = 0;
  for (float x : stochastic_probe_values()) {
    if (std::isnan(x)) {
      EXPECT_EQ(f32_to_bf16_bits_stochastic(x, 0xFFFFFFFFu), f32_to_bf16_bits(x));
      EXPECT_EQ(f32_to_f16_bits_stochastic(x, 0xFFFFFFFFu), f32_to_f16_bits(x));
      continue;
    }
    const auto [bf16_down, bf16_up] = neighbours(x, bf16, bf16_back);
    const auto [f16_down, f16_up] = neighbours(x, f16, f16_back);
    const bool bf16_overflows = std::isinf(bf16_back(bf16(x)));
    const bool f16_overflows = std::isinf(f16_back(f16(x)));
    const Philox4x32Block r = philox_block(11, block++);
    for (uint32_t w : {0u, 0xFFFFFFFFu, r.word[0], r.word[1]}) {
      const uint32_t b = f32_to_bf16_bits_stochastic(x, w);
      const uint32_t h = f32_to_f16_bits_stochastic(x, w);
      if (bf16_overflows) {
        EXPECT_EQ(b, bf16(x)) << x;  // inf exactly where RNE gives inf
      } else {
        EXPECT_TRUE(b == bf16_down || (b == bf16_up && !std::isinf(bf16_back(b)))) << x;
      }
      if (f16_overflows) {
        EXPECT_EQ(h, f16(x)) << x;
      } else {
        EXPECT_TRUE(h == f16_down || (h == f16_up && !std::isinf(f16_back(h)))) << x;
      }
    }
  }
}

// The chance of rounding away is exactly the discarded fraction: the result depends only on the
// top 16 (bf16) or 13 (f16 normal) random bits, so enumerating those counts the round-ups.
TEST(StochasticRounding, ProbabilityIsTheDiscardedFractionExactly) {
  for (uint32_t x_bits : {0x3F800001u, 0x3F80FFFFu, 0x3F808000u, 0xC0123456u, 0x00001234u}) {
    uint32_t ups = 0;
    for (uint32_t top = 0; top < 65536; ++top) {
      ups += f32_to_bf16_bits_stochastic(f32(x_bits), (top << 16) | 0xFFFFu) != (x_bits >> 16);
    }
    EXPECT_EQ(ups, x_bits & 0xFFFFu) << std::hex << x_bits;
  }
  for (uint32_t x_bits : {0x3F800001u, 0x3F801FFFu, 0x3F801000u, 0xC7000123u, 0x38800FFFu}) {
    const uint32_t down = f32_to_f16_bits_stochastic(f32(x_bits), 0);
    uint32_t ups = 0;
    for (uint32_t top = 0; top < 8192; ++top) {
      ups += f32_to_f16_bits_stochastic(f32(x_bits), (top << 19) | 0x7FFFFu) != down;
    }
    EXPECT_EQ(ups, x_bits & 0x1FFFu) << std::hex << x_bits;
  }
}

// The mean of many roundings is the value, within 6 standard deviations of the mean of N
// Bernoulli draws (deterministic: fixed Philox stream).
TEST(StochasticRounding, MeanEqualsTheValue) {
  constexpr int kDraws = 1 << 16;
  const float bf16_values[] = {1.0f + 0x1p-9f, 3.14159265f, -1e-3f, 1e30f, f32(0x00012345)};
  const float f16_values[] = {1.0f + 0x1p-13f,
                              3.14159265f,
                              -1e-3f,
                              60000.5f,
                              3e-6f,   // subnormal f16
                              -2e-8f,  // below the smallest subnormal (5.96e-8)
                              1e-9f};
  uint64_t offset = 0;
  auto check = [&](float x, auto round, auto decode, double gap) {
    double sum = 0;
    for (int i = 0; i < kDraws; i += 4) {
      const Philox4x32Block r = philox_block(2024, offset++);
      for (uint32_t w : r.word) sum += decode(round(x, w));
    }
    const double mean = sum / kDraws;
    const double bound = 6.0 * gap * 0.5 / std::sqrt(static_cast<double>(kDraws));
    EXPECT_NEAR(mean, static_cast<double>(x), bound) << "x = " << x;
  };
  for (float x : bf16_values) {
    const float lo = bf16_bits_to_f32(static_cast<uint16_t>(bits(x) >> 16));
    const float hi = bf16_bits_to_f32(static_cast<uint16_t>((bits(x) >> 16) + 1));
    check(x, f32_to_bf16_bits_stochastic, bf16_bits_to_f32,
          std::fabs(static_cast<double>(hi) - lo));
  }
  for (float x : f16_values) {
    const auto [down, up] = neighbours(
        x, [](float v) -> uint32_t { return f32_to_f16_bits(v); },
        [](uint32_t c) { return f16_bits_to_f32(static_cast<uint16_t>(c)); });
    const double gap = std::fabs(static_cast<double>(f16_bits_to_f32(static_cast<uint16_t>(up))) -
                                 f16_bits_to_f32(static_cast<uint16_t>(down)));
    check(x, f32_to_f16_bits_stochastic, f16_bits_to_f32, gap);
  }
}

TEST(StochasticRounding, SpecialsAndOverflow) {
  for (uint32_t w : {0u, 0xFFFFFFFFu}) {
    EXPECT_EQ(f32_to_bf16_bits_stochastic(kInf, w), 0x7F80);
    EXPECT_EQ(f32_to_bf16_bits_stochastic(-kInf, w), 0xFF80);
    EXPECT_EQ(f32_to_bf16_bits_stochastic(f32(0x7F7F7FFF), w), 0x7F7F);  // RNE: max, so never inf
    EXPECT_EQ(f32_to_bf16_bits_stochastic(f32(0xFF7F8000), w), 0xFF80);  // RNE overflows too
    EXPECT_EQ(f32_to_bf16_bits_stochastic(f32(0xFF800001), w), 0xFFC0);
    EXPECT_EQ(f32_to_f16_bits_stochastic(kInf, w), 0x7C00);
    EXPECT_EQ(f32_to_f16_bits_stochastic(65519.0f, w), 0x7BFF);
    EXPECT_EQ(f32_to_f16_bits_stochastic(-65520.0f, w), 0xFC00);
    EXPECT_EQ(f32_to_f16_bits_stochastic(f32(0x7F800001), w), 0x7C01);
    EXPECT_EQ(f32_to_f16_bits_stochastic(-0.0f, w), 0x8000);
  }
  EXPECT_EQ(f32_to_f16_bits_stochastic(0x1p-14f - 0x1p-30f, 0xFFFFFFFFu), 0x0400);  // into normal
  EXPECT_EQ(f32_to_f16_bits_stochastic(0x1p-14f - 0x1p-30f, 0), 0x03FF);
}

TEST(DTypeDispatch, MapsEveryDType) {
  static_assert(std::is_same_v<cpp_type_for_t<DType::bf16>, BFloat16>);
  static_assert(std::is_same_v<cpp_type_for_t<DType::boolean>, bool>);
  static_assert(dtype_of_v<Float8E4M3> == DType::f8_e4m3fn);
  static_assert(dtype_of_v<int64_t> == DType::i64);
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto dtype = static_cast<DType>(i);
    EXPECT_EQ(HEADROOM_DISPATCH_DTYPE(dtype, T, return sizeof(T);), dtype_size(dtype))
        << dtype_name(dtype);
    EXPECT_EQ(HEADROOM_DISPATCH_DTYPE(dtype, T, return dtype_of_v<T>;), dtype);
  }
}

TEST(DTypeDispatch, RunsTheBodyWithT) {
  std::vector<unsigned char> storage(8);
  HEADROOM_DISPATCH_DTYPE(DType::f16, T, {
    T* p = reinterpret_cast<T*>(storage.data());
    p[1] = T(2.0f);
  });
  EXPECT_EQ(storage[2], 0x00);
  EXPECT_EQ(storage[3], 0x40);  // f16 2.0 = 0x4000, little-endian
  EXPECT_THROW(dispatch_dtype(static_cast<DType>(200), [](auto) {}), ValueError);
}

}  // namespace
}  // namespace headroom
