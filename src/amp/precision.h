// Precision recipes: the one option that chooses parameter dtype, autocast, loss scaling and the
// optimizer's state format, as HF's `bf16=True` / `fp16=True` do, plus pure bf16.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace headroom {

// Note [Precision recipes]
// Bytes per parameter that each recipe holds between steps with AdamW (what the guides tabulate;
// tests/amp/test_precision.cpp asserts them on a model through allocator statistics):
//   fp32        f32 weights 4 + f32 grads 4 + f32 m, v 8                                  = 16
//   bf16 / fp16 the same 16: the f32 weights are the master weights and autocast computes
//               with bf16 / f16 casts of them, which exist only during forward and backward
//               (2 bytes per cast parameter, once per region through the cast cache); this is
//               PyTorch's autocast recipe, which the HF docs count as 18 (4 + 2 weights,
//               4 grads, 8 states) and ZeRO as 16 (2 + 2 low-precision copies + 12 fp32).
//   pure_bf16   bf16 weights 2 + bf16 grads 2 + bf16 m, v 4                               = 8
//               no fp32 copy anywhere; the update runs in fp32 and is written back with
//               stochastic rounding;
//   pure_bf16+kahan  the same with Kahan compensation instead: + a bf16 buffer 2           = 10
//               (AdamW's; the other optimizers have no Kahan update and refuse it).
// fp16 alone needs loss scaling (GradScaler): f16 gradients below 2^-24 flush to zero, bf16's
// exponent range is f32's.
enum class Precision { fp32, bf16, fp16, pure_bf16 };

struct PrecisionRecipe {
  Precision precision = Precision::fp32;
  DType param_dtype = DType::f32;       // what Module::to makes the weights
  std::optional<DType> autocast_dtype;  // the autocast region's dtype, if any
  bool loss_scaling = false;            // dynamic loss scaling (GradScaler)
  DType optimizer_state_dtype = DType::f32;
  bool kahan_summation = false;      // pure_bf16 only
  bool stochastic_rounding = false;  // pure_bf16 without Kahan

  // Bytes per parameter between steps with AdamW, as in Note [Precision recipes].
  int adamw_bytes_per_parameter() const;
  std::string name() const;
};

// The recipe a `precision` option names: "fp32" (also "no"), "bf16", "fp16", "pure_bf16" or
// "pure_bf16+kahan", the spellings PrecisionRecipe::name() gives back; ValueError naming the value
// and the choices.
PrecisionRecipe parse_precision(std::string_view name);
std::string precision_name(Precision precision);
// The recipe of `precision`; kahan_summation is for pure_bf16 (ValueError otherwise).
PrecisionRecipe precision_recipe(Precision precision, bool kahan_summation = false);

}  // namespace headroom
