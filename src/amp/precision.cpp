// Precision recipes and their names.
#include "amp/precision.h"

#include "core/error.h"

namespace headroom {

PrecisionRecipe parse_precision(std::string_view name) {
  if (name == "fp32" || name == "no") return precision_recipe(Precision::fp32);
  if (name == "bf16") return precision_recipe(Precision::bf16);
  if (name == "fp16") return precision_recipe(Precision::fp16);
  if (name == "pure_bf16") return precision_recipe(Precision::pure_bf16);
  if (name == "pure_bf16+kahan") return precision_recipe(Precision::pure_bf16, true);
  throw ValueError(str_cat("precision: '", name,
                           "' is not one of fp32, bf16, fp16, pure_bf16, pure_bf16+kahan"));
}

std::string precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
    case Precision::pure_bf16:
      return "pure_bf16";
  }
  return "?";
}

PrecisionRecipe precision_recipe(Precision precision, bool kahan_summation) {
  if (kahan_summation && precision != Precision::pure_bf16) {
    throw ValueError(str_cat("precision: Kahan summation is for pure_bf16 (bf16 weights), not ",
                             precision_name(precision), ", whose weights are f32"));
  }
  PrecisionRecipe r;
  r.precision = precision;
  switch (precision) {
    case Precision::fp32:
      break;
    case Precision::bf16:
      r.autocast_dtype = DType::bf16;
      break;
    case Precision::fp16:
      r.autocast_dtype = DType::f16;
      r.loss_scaling = true;
      break;
    case Precision::pure_bf16:
      r.param_dtype = DType::bf16;
      r.optimizer_state_dtype = DType::bf16;
      r.kahan_summation = kahan_summation;
      r.stochastic_rounding = !kahan_summation;
      break;
  }
  return r;
}

int PrecisionRecipe::adamw_bytes_per_parameter() const {
  const int weight = static_cast<int>(dtype_size(param_dtype));
  const int state = 2 * static_cast<int>(dtype_size(optimizer_state_dtype));
  return weight + weight + state + (kahan_summation ? 2 : 0);
}

std::string PrecisionRecipe::name() const {
  return precision_name(precision) + (kahan_summation ? "+kahan" : "");
}

}  // namespace headroom
