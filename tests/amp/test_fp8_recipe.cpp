// Transformer Engine's FP8 scale formulas against tools/gen_fp8_golden.py, bit for bit: delayed
// scaling's amax history and scale over steps (zero, inf, NaN and tiny amaxes included), current
// scaling's scale, block scaling's power-of-two scale and MXFP8's E8M0 exponent.
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <cmath>
#include <vector>

#include "amp/fp8_golden.h"
#include "amp/fp8_recipe.h"
#include "core/error.h"
#include "optim/golden_lines.h"

namespace headroom {
namespace {

using fp8_test::hex_f32;
using fp8_test::read_hex_floats;

uint32_t bits(float x) { return detail::f32_bits(x); }

// TE's formulas are IEEE arithmetic (its CUDA kernels do not flush subnormals); headroom's CPU
// backend turns on flush-to-zero process-wide (backend/cpu/denormals.h), so these tests switch
// FTZ and DAZ off while they run. Under them the CPU differs only where TE produces subnormals:
// scale_inv of a scale above 2^126 (an amax below about 5e-36) is 0 instead.
class IeeeArithmetic {
 public:
  IeeeArithmetic() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~(0x8000u | 0x0040u)); }
  ~IeeeArithmetic() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
};

DType fp8_dtype(const std::string& name) {
  return name == "e5m2" ? DType::f8_e5m2 : DType::f8_e4m3fn;
}

TEST(Fp8Recipe, DelayedScalingHistoryAndScaleMatchTransformerEngine) {
  IeeeArithmetic ieee;
  Fp8Recipe recipe;
  std::vector<float> history;
  float scale = 1.0f, scale_inv = 1.0f;
  int sequences = 0, steps = 0;
  optim_test::for_each_fixture_line(fp8_test::kFp8Golden, [&](const std::string& key,
                                                              std::istringstream& in) {
    if (key == "delayed") {
      std::string format, algo;
      in >> format >> recipe.amax_history_len >> algo >> recipe.margin;
      recipe.format = format == "e5m2" ? Fp8Format::hybrid : Fp8Format::e4m3;
      recipe.amax_compute_algo = parse_amax_compute_algo(algo);
      history.assign(static_cast<size_t>(recipe.amax_history_len), 0.0f);
      scale = scale_inv = 1.0f;
      ++sequences;
    } else if (key == "step") {
      const std::vector<float> v = read_hex_floats(in);
      ASSERT_EQ(v.size(), 3 + history.size());
      // What the step's quantizations record into slot 0 (a max; NaN spreads).
      history[0] = std::isnan(v[0]) ? v[0] : std::max(history[0], v[0]);
      const DType dtype =
          recipe.dtype(recipe.format == Fp8Format::hybrid ? Fp8Role::grad_output : Fp8Role::input);
      delayed_scaling_update(history.data(), recipe.amax_history_len, recipe.amax_compute_algo,
                             recipe.scaled_max(dtype), &scale, &scale_inv);
      EXPECT_EQ(bits(scale), bits(v[1])) << "sequence " << sequences << " step amax " << v[0];
      EXPECT_EQ(bits(scale_inv), bits(v[2])) << "sequence " << sequences;
      for (size_t i = 0; i < history.size(); ++i) {
        EXPECT_EQ(bits(history[i]), bits(v[3 + i])) << "sequence " << sequences << " slot " << i;
      }
      ++steps;
    }
  });
  EXPECT_EQ(sequences, 5);
  EXPECT_EQ(steps, 45);
}

TEST(Fp8Recipe, CurrentBlockAndMxfp8ScalesMatchTransformerEngine) {
  IeeeArithmetic ieee;
  int checked = 0;
  optim_test::for_each_fixture_line(
      fp8_test::kFp8Golden, [&](const std::string& key, std::istringstream& in) {
        if (key != "current" && key != "pow2" && key != "e8m0") return;
        std::string format, amax_word, want;
        in >> format >> amax_word >> want;
        const float amax = hex_f32(amax_word), max = fp8_max(fp8_dtype(format));
        if (key == "e8m0") {
          EXPECT_EQ(int{mxfp8_block_exponent(amax, max)}, std::stoi(want)) << format << " " << amax;
        } else {
          EXPECT_EQ(bits(scale_from_amax(amax, max, key == "pow2")), bits(hex_f32(want)))
              << key << " " << format << " amax " << amax;
        }
        ++checked;
      });
  EXPECT_EQ(checked, 84);
}

TEST(Fp8Recipe, RolesDtypesAndBlocksFollowTheRecipe) {
  Fp8Recipe r;
  EXPECT_EQ(r.dtype(Fp8Role::input), DType::f8_e4m3fn);
  EXPECT_EQ(r.dtype(Fp8Role::weight), DType::f8_e4m3fn);
  EXPECT_EQ(r.dtype(Fp8Role::grad_output), DType::f8_e5m2);
  r.format = Fp8Format::e4m3;
  EXPECT_EQ(r.dtype(Fp8Role::grad_output), DType::f8_e4m3fn);
  EXPECT_TRUE(r.block(Fp8Role::weight).per_tensor());
  r.kind = Fp8RecipeKind::mxfp8;
  EXPECT_EQ(r.block(Fp8Role::input).cols, 32);
  EXPECT_TRUE(r.block(Fp8Role::input).e8m0);
  r.kind = Fp8RecipeKind::block;
  EXPECT_EQ(r.block(Fp8Role::weight).rows, 128);
  EXPECT_EQ(r.block(Fp8Role::grad_output).rows, 1);
  EXPECT_EQ(r.block(Fp8Role::grad_output).cols, 128);
  EXPECT_THROW(parse_fp8_recipe_kind("tensorwise"), ValueError);
  EXPECT_EQ(parse_fp8_format("HYBRID"), Fp8Format::hybrid);
  r.amax_history_len = 0;
  EXPECT_THROW(r.validate(), ValueError);
}

}  // namespace
}  // namespace headroom
