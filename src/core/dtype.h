// The number formats headroom stores tensors in, as one traits table. Every switch over dtypes
// is generated from HEADROOM_DTYPE_TABLE so that adding a format touches one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace headroom {

// X(id, name, torch_name, size, is_floating, has_inf, exponent_bits, mantissa_bits, exponent_bias,
//   max, min_normal, min_subnormal, epsilon)
// Integer rows carry 0 in the float-only columns and their largest value in `max`.
#define HEADROOM_DTYPE_TABLE(X)                                                           \
  X(f32, "f32", "float32", 4, true, true, 8, 23, 127, 3.4028234663852886e38,              \
    1.1754943508222875e-38, 1.401298464324817e-45, 1.1920928955078125e-07)                \
  X(f16, "f16", "float16", 2, true, true, 5, 10, 15, 65504.0, 6.103515625e-05,            \
    5.960464477539063e-08, 0.0009765625)                                                  \
  X(bf16, "bf16", "bfloat16", 2, true, true, 8, 7, 127, 3.3895313892515355e38,            \
    1.1754943508222875e-38, 9.183549615799121e-41, 0.0078125)                             \
  X(f8_e4m3fn, "f8_e4m3fn", "float8_e4m3fn", 1, true, false, 4, 3, 7, 448.0, 0.015625,    \
    0.001953125, 0.125)                                                                   \
  X(f8_e5m2, "f8_e5m2", "float8_e5m2", 1, true, true, 5, 2, 15, 57344.0, 6.103515625e-05, \
    1.52587890625e-05, 0.25)                                                              \
  X(i32, "i32", "int32", 4, false, false, 0, 0, 0, 2147483647.0, 0.0, 0.0, 0.0)           \
  X(i64, "i64", "int64", 8, false, false, 0, 0, 0, 9223372036854775807.0, 0.0, 0.0, 0.0)  \
  X(u8, "u8", "uint8", 1, false, false, 0, 0, 0, 255.0, 0.0, 0.0, 0.0)                    \
  X(boolean, "bool", "bool", 1, false, false, 0, 0, 0, 1.0, 0.0, 0.0, 0.0)

enum class DType : uint8_t {
#define HEADROOM_DTYPE_ENUM(id, ...) id,
  HEADROOM_DTYPE_TABLE(HEADROOM_DTYPE_ENUM)
#undef HEADROOM_DTYPE_ENUM
};

inline constexpr int kNumDTypes = 0
#define HEADROOM_DTYPE_COUNT(...) +1
    HEADROOM_DTYPE_TABLE(HEADROOM_DTYPE_COUNT)
#undef HEADROOM_DTYPE_COUNT
    ;

struct DTypeTraits {
  DType dtype;
  const char* name;        // headroom's short name, e.g. "bf16"
  const char* torch_name;  // PyTorch's name, e.g. "bfloat16"
  size_t size;             // bytes per element
  bool is_floating;
  bool has_inf;  // f8_e4m3fn has NaN but no infinities
  int exponent_bits;
  int mantissa_bits;  // explicit fraction bits
  int exponent_bias;
  double max;  // largest finite value
  double min_normal;
  double min_subnormal;
  double epsilon;  // distance from 1 to the next value
};

const DTypeTraits& dtype_traits(DType dtype);

inline size_t dtype_size(DType dtype) { return dtype_traits(dtype).size; }
inline const char* dtype_name(DType dtype) { return dtype_traits(dtype).name; }
inline bool is_floating(DType dtype) { return dtype_traits(dtype).is_floating; }

// Accepts headroom's names, PyTorch's names and the usual aliases (fp32, half, bfloat16, ...).
// Throws ValueError naming the accepted spellings.
DType dtype_from_name(std::string_view name);

}  // namespace headroom
