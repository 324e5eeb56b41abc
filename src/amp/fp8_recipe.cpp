// The FP8 recipes' dtypes, blocks, names and checks (see fp8_recipe.h).
#include "amp/fp8_recipe.h"

#include <cmath>

#include "core/error.h"

namespace headroom {

DType Fp8Recipe::dtype(Fp8Role role) const {
  return role == Fp8Role::grad_output && format == Fp8Format::hybrid ? DType::f8_e5m2
                                                                     : DType::f8_e4m3fn;
}

Fp8Block Fp8Recipe::block(Fp8Role role) const {
  switch (kind) {
    case Fp8RecipeKind::delayed:
    case Fp8RecipeKind::current:
      return {};
    case Fp8RecipeKind::mxfp8:
      return {1, 32, true};
    case Fp8RecipeKind::block:
      return role == Fp8Role::weight ? Fp8Block{128, 128, false} : Fp8Block{1, 128, false};
  }
  return {};
}

float fp8_max(DType dtype) {
  if (dtype == DType::f8_e4m3fn) return kFp8E4M3Max;
  if (dtype == DType::f8_e5m2) return kFp8E5M2Max;
  throw ValueError(
      str_cat("fp8: ", dtype_name(dtype), " is not an FP8 dtype (f8_e4m3fn, f8_e5m2)"));
}

float Fp8Recipe::scaled_max(DType dtype) const {
  // TE: fp8_dtype_max * std::pow(2.f, -margin), in float.
  return fp8_max(dtype) * std::pow(2.0f, static_cast<float>(-margin));
}

std::string Fp8Recipe::describe() const {
  std::string s = str_cat(fp8_recipe_kind_name(kind), "(", fp8_format_name(format));
  if (kind == Fp8RecipeKind::delayed) {
    s += str_cat(", history ", amax_history_len, ", ", amax_compute_algo_name(amax_compute_algo),
                 ", margin ", margin);
  }
  return s + ")";
}

void Fp8Recipe::validate() const {
  HEADROOM_CHECK_VALUE(amax_history_len >= 1, "fp8_amax_history_len: ", amax_history_len,
                       " must be at least 1");
  HEADROOM_CHECK_VALUE(margin >= 0, "fp8_margin: ", margin, " must be at least 0");
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

}  // namespace

Fp8RecipeKind parse_fp8_recipe_kind(std::string_view name) {
  const std::string n = lower(name);
  if (n == "delayed") return Fp8RecipeKind::delayed;
  if (n == "current") return Fp8RecipeKind::current;
  if (n == "mxfp8") return Fp8RecipeKind::mxfp8;
  if (n == "block") return Fp8RecipeKind::block;
  throw ValueError(
      str_cat("fp8_recipe: '", name, "' is not one of delayed, current, mxfp8, block"));
}

Fp8Format parse_fp8_format(std::string_view name) {
  const std::string n = lower(name);
  if (n == "hybrid") return Fp8Format::hybrid;
  if (n == "e4m3") return Fp8Format::e4m3;
  throw ValueError(str_cat("fp8_format: '", name, "' is not one of hybrid, e4m3"));
}

AmaxComputeAlgo parse_amax_compute_algo(std::string_view name) {
  if (name == "max") return AmaxComputeAlgo::max;
  if (name == "most_recent") return AmaxComputeAlgo::most_recent;
  throw ValueError(str_cat("fp8_amax_compute_algo: '", name, "' is not one of max, most_recent"));
}

const char* fp8_recipe_kind_name(Fp8RecipeKind kind) {
  switch (kind) {
    case Fp8RecipeKind::delayed:
      return "delayed";
    case Fp8RecipeKind::current:
      return "current";
    case Fp8RecipeKind::mxfp8:
      return "mxfp8";
    case Fp8RecipeKind::block:
      return "block";
  }
  return "?";
}

const char* fp8_format_name(Fp8Format format) {
  return format == Fp8Format::hybrid ? "hybrid" : "e4m3";
}

const char* amax_compute_algo_name(AmaxComputeAlgo algo) {
  return algo == AmaxComputeAlgo::max ? "max" : "most_recent";
}

}  // namespace headroom
