// Loading and storing one element of any dtype, through f32 for floating formats and int64 for
// integer ones. CPU and CUDA kernels share these, so conversions agree bit for bit. They match
// PyTorch's casts: integers reach low-precision floats via f32; floats become integers by
// truncation toward zero, with NaN -> 0 and saturation at the range where C++ and PyTorch leave
// out-of-range casts undefined; integers narrow modulo 2^bits.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/float_formats.h"
#include "core/host_device.h"

namespace headroom {

// dtype_traits() lives in host memory; kernels ask this instead.
HEADROOM_HD inline bool is_floating_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::f8_e4m3fn:
    case DType::f8_e5m2:
      return true;
    default:
      return false;
  }
}

HEADROOM_HD inline float load_as_f32(const void* p, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return *static_cast<const float*>(p);
    case DType::f16:
      return f16_bits_to_f32(*static_cast<const uint16_t*>(p));
    case DType::bf16:
      return bf16_bits_to_f32(*static_cast<const uint16_t*>(p));
    case DType::f8_e4m3fn:
      return f8_e4m3fn_bits_to_f32(*static_cast<const uint8_t*>(p));
    case DType::f8_e5m2:
      return f8_e5m2_bits_to_f32(*static_cast<const uint8_t*>(p));
    case DType::i32:
      return static_cast<float>(*static_cast<const int32_t*>(p));
    case DType::i64:
      return static_cast<float>(*static_cast<const int64_t*>(p));
    case DType::u8:
      return static_cast<float>(*static_cast<const uint8_t*>(p));
    case DType::boolean:
      return *static_cast<const uint8_t*>(p) ? 1.0f : 0.0f;
  }
  return 0.0f;
}

HEADROOM_HD inline int64_t load_as_i64(const void* p, DType dtype) {
  switch (dtype) {
    case DType::i32:
      return *static_cast<const int32_t*>(p);
    case DType::i64:
      return *static_cast<const int64_t*>(p);
    case DType::u8:
      return *static_cast<const uint8_t*>(p);
    case DType::boolean:
      return *static_cast<const uint8_t*>(p) ? 1 : 0;
    default:
      return static_cast<int64_t>(load_as_f32(p, dtype));
  }
}

// Truncation toward zero with NaN -> 0 and saturation at [lo, hi].
HEADROOM_HD inline int64_t saturating_to_int(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v <= lo) return static_cast<int64_t>(lo);
  if (v >= hi) return hi >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(hi);
  return static_cast<int64_t>(v);
}

HEADROOM_HD inline void store_from_f32(void* p, DType dtype, float v, Overflow overflow) {
  switch (dtype) {
    case DType::f32:
      *static_cast<float*>(p) = v;
      return;
    case DType::f16:
      *static_cast<uint16_t*>(p) = f32_to_f16_bits(v, overflow);
      return;
    case DType::bf16:
      *static_cast<uint16_t*>(p) = f32_to_bf16_bits(v, overflow);
      return;
    case DType::f8_e4m3fn:
      *static_cast<uint8_t*>(p) = f32_to_f8_e4m3fn_bits(v, overflow);
      return;
    case DType::f8_e5m2:
      *static_cast<uint8_t*>(p) = f32_to_f8_e5m2_bits(v, overflow);
      return;
    case DType::i32:
      *static_cast<int32_t*>(p) =
          static_cast<int32_t>(saturating_to_int(v, -2147483648.0, 2147483647.0));
      return;
    case DType::i64:
      *static_cast<int64_t*>(p) =
          saturating_to_int(v, -9223372036854775808.0, 9223372036854775807.0);
      return;
    case DType::u8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(saturating_to_int(v, 0.0, 255.0));
      return;
    case DType::boolean:
      *static_cast<uint8_t*>(p) = v != 0.0f;
      return;
  }
}

HEADROOM_HD inline void store_from_i64(void* p, DType dtype, int64_t v) {
  switch (dtype) {
    case DType::i32:
      *static_cast<int32_t*>(p) = static_cast<int32_t>(v);
      return;
    case DType::i64:
      *static_cast<int64_t*>(p) = v;
      return;
    case DType::u8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
      return;
    case DType::boolean:
      *static_cast<uint8_t*>(p) = v != 0;
      return;
    default:
      store_from_f32(p, dtype, static_cast<float>(v), Overflow::ieee);
      return;
  }
}

// The bytes `value` has in `dtype`, as fill and arange write it: floating dtypes via f32,
// integers by saturating truncation.
HEADROOM_HD inline void store_from_double(void* p, DType dtype, double value) {
  if (dtype == DType::boolean) {
    *static_cast<uint8_t*>(p) = value != 0;
  } else if (is_floating_dtype(dtype)) {
    store_from_f32(p, dtype, static_cast<float>(value), Overflow::ieee);
  } else {
    store_from_i64(p, dtype,
                   saturating_to_int(value, -9223372036854775808.0, 9223372036854775807.0));
  }
}

}  // namespace headroom
