// Harness cases for the FP8 linear (quant/fp8_linear.h), one per recipe and weight layout, both
// the FP8 GEMM path (sizes multiples of 16) and the dequantized one. Each call makes a fresh
// layer state, so the op is a pure function of its inputs, as the harness needs: delayed scaling
// then quantizes with its initial scale of 1.
//
// The gradient tolerance, and why: the finite differences see the forward's quantization of
// x +- eps v (E4M3: up to 2^-4 relative per value), the analytic gradient the backward's (the
// output gradient in E5M2 under HYBRID: up to 2^-3 relative per value; E4M3: 2^-4). The op is
// linear in each input, so eps = 1 is exact for the unquantized product and makes the forward's
// rounding small against the step. Rounding errors of independent values partly cancel in the
// sums; 0.25 (HYBRID) and 0.15 (E4M3) of the typical gradient bound what is left (the largest
// error seen is about a fifth of the tolerance), while a wrong transpose, scale or layout gives
// errors of order 1.
#include "ops/op_harness.h"
#include "quant/fp8_linear.h"

namespace headroom::testing {

namespace {

Tensor run_fp8_linear(const std::vector<Tensor>& in, Fp8Recipe recipe, WeightLayout layout) {
  Fp8Training fp8(recipe);
  const std::shared_ptr<Fp8LinearState> state = fp8.new_layer(in[0].device());
  return fp8_linear(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), layout, state);
}

Fp8Recipe recipe_of(Fp8RecipeKind kind, Fp8Format format) {
  Fp8Recipe r;
  r.kind = kind;
  r.format = format;
  r.amax_history_len = 4;
  return r;
}

void register_fp8_case(const std::string& name, std::vector<OpInput> inputs, Fp8Recipe recipe,
                       WeightLayout layout) {
  OpCase c{name, std::move(inputs), [recipe, layout](const std::vector<Tensor>& in) {
             return run_fp8_linear(in, recipe, layout);
           }};
  c.fd_eps = 1.0;
  c.grad_rtol = recipe.format == Fp8Format::hybrid ? 0.25 : 0.15;
  c.grad_atol = 1e-3;
  c.low_precision = {};  // FP8 rounds its operands: not the fp32 result rounded once
  c.gpu_accumulation_atol_fraction = 0x1p-11;  // cuBLASLt's FP8 GEMM on Hopper
  register_op_case(std::move(c));
}

}  // namespace

HEADROOM_OP_CASES(fp8_cases) {
  // [2, 8, 32] @ [16, 32]^T: every GEMM (forward, dgrad, wgrad over 16 rows) on gemm_fp8.
  register_fp8_case("fp8_linear/delayed_hybrid_gemm_fp8",
                    {normal({2, 8, 32}), normal({16, 32}), normal({16})},
                    recipe_of(Fp8RecipeKind::delayed, Fp8Format::hybrid), WeightLayout::out_in);
  register_fp8_case("fp8_linear/current_e4m3_conv1d",
                    {normal({5, 24}), normal({24, 12}), normal({12})},
                    recipe_of(Fp8RecipeKind::current, Fp8Format::e4m3), WeightLayout::in_out);
  register_fp8_case("fp8_linear/current_hybrid_gemm_fp8_no_bias",
                    {normal({16, 48}), normal({32, 48})},
                    recipe_of(Fp8RecipeKind::current, Fp8Format::hybrid), WeightLayout::out_in);
  register_fp8_case("fp8_linear/mxfp8", {normal({3, 70}), normal({9, 70}), normal({9})},
                    recipe_of(Fp8RecipeKind::mxfp8, Fp8Format::hybrid), WeightLayout::out_in);
  register_fp8_case("fp8_linear/block", {normal({4, 130}), normal({6, 130}), normal({6})},
                    recipe_of(Fp8RecipeKind::block, Fp8Format::e4m3), WeightLayout::out_in);
}

}  // namespace headroom::testing
