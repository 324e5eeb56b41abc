// Transformer Engine's FP8 recipes as one typed value (DelayedScaling, Float8CurrentScaling,
// MXFP8BlockScaling, Float8BlockScaling), with the dtypes and block shapes each quantizes with.
// The scale formulas themselves are in core/fp8_scaling.h, shared with the kernels.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/fp8_scaling.h"

namespace headroom {

enum class Fp8RecipeKind : uint8_t { delayed, current, mxfp8, block };

// HYBRID: E4M3 forward (weights, activations), E5M2 backward (gradients); E4M3: E4M3 throughout.
enum class Fp8Format : uint8_t { hybrid, e4m3 };

// What a tensor is in an FP8 linear, which decides its dtype and, for Float8BlockScaling, its
// block: weights get 128 x 128 blocks, activations and gradients 1 x 128.
enum class Fp8Role : uint8_t { input, weight, grad_output };

// A block of values that share one scale; {0, 0} is one scale for the whole tensor.
struct Fp8Block {
  int64_t rows = 0;
  int64_t cols = 0;
  bool e8m0 = false;  // the scale is an E8M0 exponent (MXFP8), else an fp32 scale_inv
  bool per_tensor() const { return rows == 0; }
};

struct Fp8Recipe {
  Fp8RecipeKind kind = Fp8RecipeKind::delayed;
  Fp8Format format = Fp8Format::hybrid;
  // DelayedScaling only (TE's defaults).
  int64_t amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::max;
  int margin = 0;

  // E4M3 for inputs and weights; gradients E5M2 under HYBRID.
  DType dtype(Fp8Role role) const;
  // The block a tensor of `role` is scaled in: per tensor (delayed, current), 1 x 32 E8M0
  // (mxfp8), 1 x 128 or, for weights, 128 x 128 (block).
  Fp8Block block(Fp8Role role) const;
  // fp8_max(dtype) * 2^-margin: what delayed scaling maps its amax to.
  float scaled_max(DType dtype) const;
  // "delayed(hybrid, history 1024, max, margin 0)", "mxfp8(e4m3)", ...
  std::string describe() const;
  // ValueError naming the field and its limit for a history length below 1 or a negative margin.
  void validate() const;
};

// The largest finite value of an FP8 dtype (448 or 57344); ValueError for another dtype.
float fp8_max(DType dtype);

// The names accelerate / TE use on the command line; each a ValueError naming the value and the
// choices otherwise.
Fp8RecipeKind parse_fp8_recipe_kind(std::string_view name);  // delayed | current | mxfp8 | block
Fp8Format parse_fp8_format(std::string_view name);           // hybrid | e4m3 (either case)
AmaxComputeAlgo parse_amax_compute_algo(std::string_view name);  // max | most_recent
const char* fp8_recipe_kind_name(Fp8RecipeKind kind);
const char* fp8_format_name(Fp8Format format);
const char* amax_compute_algo_name(AmaxComputeAlgo algo);

}  // namespace headroom
