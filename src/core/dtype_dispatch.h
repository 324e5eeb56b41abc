// The C++ type of each DType, both ways, and HEADROOM_DISPATCH_DTYPE, which runs a body with `T`
// bound to the C++ type of a runtime DType. Kernels written once as templates use it.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/float_formats.h"

namespace headroom {

// One row per row of HEADROOM_DTYPE_TABLE; dispatch_dtype below is generated from that table, so
// a DType without a row here fails to compile.
#define HEADROOM_DTYPE_CPP_TYPES(X) \
  X(f32, float)                     \
  X(f16, Half)                      \
  X(bf16, BFloat16)                 \
  X(f8_e4m3fn, Float8E4M3)          \
  X(f8_e5m2, Float8E5M2)            \
  X(i32, int32_t)                   \
  X(i64, int64_t)                   \
  X(u8, uint8_t)                    \
  X(boolean, bool)

template <DType D>
struct cpp_type_for;

template <typename T>
struct dtype_of;

#define HEADROOM_DTYPE_CPP_TYPE(id, cpp_type) \
  template <>                                 \
  struct cpp_type_for<DType::id> {            \
    using type = cpp_type;                    \
  };                                          \
  template <>                                 \
  struct dtype_of<cpp_type> {                 \
    static constexpr DType value = DType::id; \
  };
HEADROOM_DTYPE_CPP_TYPES(HEADROOM_DTYPE_CPP_TYPE)
#undef HEADROOM_DTYPE_CPP_TYPE

template <DType D>
using cpp_type_for_t = typename cpp_type_for<D>::type;

template <typename T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the C++ type of `dtype` and returns what it returns; every
// branch must return the same type. Host only: kernels are chosen on the host.
template <typename Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
#define HEADROOM_DISPATCH_CASE(id, ...) \
  case DType::id:                       \
    return fn(TypeTag<cpp_type_for_t<DType::id>>{});
    HEADROOM_DTYPE_TABLE(HEADROOM_DISPATCH_CASE)
#undef HEADROOM_DISPATCH_CASE
  }
  throw ValueError(str_cat("dispatch_dtype: invalid DType value ", static_cast<int>(dtype)));
}

}  // namespace headroom

// HEADROOM_DISPATCH_DTYPE(dtype, T, body...) runs `body` with `T` the C++ type of the runtime
// `dtype`, e.g. HEADROOM_DISPATCH_DTYPE(t.dtype(), T, fill<T>(t, value);). The body may contain
// commas and may return a value (the same type for every dtype).
#define HEADROOM_DISPATCH_DTYPE(dtype, T, ...)                           \
  ::headroom::dispatch_dtype((dtype), [&](auto headroom_dispatch_tag_) { \
    using T = typename decltype(headroom_dispatch_tag_)::type;           \
    __VA_ARGS__                                                          \
  })
