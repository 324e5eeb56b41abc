// The dtype traits table against the formats themselves (its limits are what decoding the
// corresponding bit patterns gives) and dtype_from_name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/float_formats.h"

namespace headroom {
namespace {

// The value of a code of a floating dtype, through the conversions under test.
double decode(DType dtype, uint32_t code) {
  switch (dtype) {
    case DType::f32:
      return detail::f32_from_bits(code);
    case DType::f16:
      return f16_bits_to_f32(static_cast<uint16_t>(code));
    case DType::bf16:
      return bf16_bits_to_f32(static_cast<uint16_t>(code));
    case DType::f8_e4m3fn:
      return f8_e4m3fn_bits_to_f32(static_cast<uint8_t>(code));
    case DType::f8_e5m2:
      return f8_e5m2_bits_to_f32(static_cast<uint8_t>(code));
    default:
      throw std::logic_error("not floating");
  }
}

TEST(DTypeTraits, FloatingLimitsMatchTheBitPatterns) {
  int floating = 0;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DTypeTraits& t = dtype_traits(static_cast<DType>(i));
    ASSERT_EQ(t.dtype, static_cast<DType>(i));
    if (!t.is_floating) continue;
    ++floating;
    SCOPED_TRACE(t.name);
    const int m = t.mantissa_bits, e = t.exponent_bits;
    EXPECT_EQ(1 + e + m, static_cast<int>(8 * t.size));
    EXPECT_EQ(t.exponent_bias, (1 << (e - 1)) - 1);
    const uint32_t one = static_cast<uint32_t>(t.exponent_bias) << m;
    EXPECT_EQ(decode(t.dtype, one), 1.0);
    EXPECT_EQ(decode(t.dtype, one + 1) - 1.0, t.epsilon);
    EXPECT_EQ(decode(t.dtype, 1u << m), t.min_normal);
    EXPECT_EQ(decode(t.dtype, 1), t.min_subnormal);
    // The largest finite code: below the all-ones exponent when there are infinities, else the
    // code just below the single NaN pattern (e4m3fn: 0x7E).
    const uint32_t all_ones_exponent = ((1u << e) - 1) << m;
    const uint32_t max_code =
        t.has_inf ? all_ones_exponent - 1 : (all_ones_exponent | ((1u << m) - 1)) - 1;
    EXPECT_EQ(decode(t.dtype, max_code), t.max);
    const double at_all_ones = decode(t.dtype, all_ones_exponent);
    if (t.has_inf) {
      EXPECT_TRUE(std::isinf(at_all_ones));
    } else {
      EXPECT_TRUE(std::isfinite(at_all_ones));  // e4m3fn: 0x78 is 256
      EXPECT_TRUE(std::isnan(decode(t.dtype, max_code + 1)));
    }
  }
  EXPECT_EQ(floating, 5);
  EXPECT_EQ(dtype_traits(DType::f32).max, std::numeric_limits<float>::max());
  EXPECT_EQ(dtype_traits(DType::f32).min_subnormal, std::numeric_limits<float>::denorm_min());
}

TEST(DTypeTraits, IntegerRows) {
  EXPECT_EQ(dtype_traits(DType::i32).max, std::numeric_limits<int32_t>::max());
  EXPECT_EQ(dtype_traits(DType::i64).max, static_cast<double>(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(dtype_traits(DType::u8).max, 255.0);
  EXPECT_EQ(dtype_traits(DType::boolean).max, 1.0);
  for (DType d : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
    EXPECT_FALSE(is_floating(d));
    EXPECT_FALSE(dtype_traits(d).has_inf);
  }
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
}

TEST(DTypeFromName, RoundTripsEveryName) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DTypeTraits& t = dtype_traits(static_cast<DType>(i));
    EXPECT_EQ(dtype_from_name(t.name), t.dtype) << t.name;
    EXPECT_EQ(dtype_from_name(t.torch_name), t.dtype) << t.torch_name;
    EXPECT_STREQ(dtype_name(t.dtype), t.name);
  }
  EXPECT_EQ(dtype_from_name("half"), DType::f16);
  EXPECT_EQ(dtype_from_name("fp32"), DType::f32);
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::bf16);
  EXPECT_EQ(dtype_from_name("e4m3"), DType::f8_e4m3fn);
  EXPECT_EQ(dtype_from_name("fp8_e5m2"), DType::f8_e5m2);
}

TEST(DTypeFromName, UnknownNameSaysWhatIsAccepted) {
  try {
    dtype_from_name("fp64");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown dtype 'fp64': expected one of f32, f16, bf16, f8_e4m3fn, f8_e5m2, i32, i64, "
              "u8, bool (or the PyTorch names float32, bfloat16, float8_e4m3fn, ...)");
  }
  EXPECT_THROW(dtype_from_name(""), ValueError);
  EXPECT_THROW(dtype_from_name("F16"), ValueError);  // names are case-sensitive
}

}  // namespace
}  // namespace headroom
