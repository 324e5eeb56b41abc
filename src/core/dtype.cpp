// The dtype traits table and name lookup.
#include "core/dtype.h"

#include <array>
#include <utility>

#include "core/error.h"

namespace headroom {
namespace {

constexpr std::array<DTypeTraits, kNumDTypes> kTraits = {{
#define HEADROOM_DTYPE_TRAITS(id, name, torch_name, size, is_floating, has_inf, ebits, mbits, \
                              bias, max, min_normal, min_subnormal, eps)                      \
  {DType::id, name, torch_name, size,       is_floating,   has_inf, ebits,                    \
   mbits,     bias, max,        min_normal, min_subnormal, eps},
    HEADROOM_DTYPE_TABLE(HEADROOM_DTYPE_TRAITS)
#undef HEADROOM_DTYPE_TRAITS
}};

constexpr std::pair<std::string_view, DType> kAliases[] = {
    {"fp32", DType::f32},
    {"float", DType::f32},
    {"fp16", DType::f16},
    {"half", DType::f16},
    {"fp8_e4m3", DType::f8_e4m3fn},
    {"e4m3", DType::f8_e4m3fn},
    {"fp8_e5m2", DType::f8_e5m2},
    {"e5m2", DType::f8_e5m2},
    {"int", DType::i32},
    {"long", DType::i64},
    {"byte", DType::u8},
    {"boolean", DType::boolean},
};

}  // namespace

const DTypeTraits& dtype_traits(DType dtype) { return kTraits[static_cast<size_t>(dtype)]; }

DType dtype_from_name(std::string_view name) {
  for (const DTypeTraits& t : kTraits) {
    if (name == t.name || name == t.torch_name) return t.dtype;
  }
  for (const auto& [alias, dtype] : kAliases) {
    if (name == alias) return dtype;
  }
  std::string known;
  for (const DTypeTraits& t : kTraits) known += str_cat(known.empty() ? "" : ", ", t.name);
  throw ValueError(str_cat("unknown dtype '", name, "': expected one of ", known,
                           " (or the PyTorch names float32, bfloat16, float8_e4m3fn, ...)"));
}

}  // namespace headroom
