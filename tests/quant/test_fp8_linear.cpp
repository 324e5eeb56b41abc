// The FP8 linear's behaviour around the op (the op harness checks its gradients and plans):
// a weight quantized once per optimizer step and reused across micro-batches, the input saved
// in FP8 unless save_original_input, delayed scales that move only at end_forward / end_backward
// and then equal TE's formula, the result against the fp32 linear, and the overflow counts.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "core/grad_mode.h"
#include "core/generator.h"
#include "memory/device_memory.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/reduction.h"
#include "quant/fp8_linear.h"

namespace headroom {
namespace {

Fp8Recipe delayed_recipe() {
  Fp8Recipe r;
  r.amax_history_len = 8;
  return r;
}

float amax_of(const Tensor& t) {
  float m = 0.0f;
  for (float v : t.to(DType::f32).to_float_vector()) m = std::max(m, std::fabs(v));
  return m;
}

TEST(Fp8Linear, WeightIsQuantizedOncePerOptimizerStep) {
  Fp8Training fp8(delayed_recipe());
  auto state = fp8.new_layer(kCPU);
  Generator g(1);
  const Tensor w = Tensor::randn({32, 64}, DType::f32, kCPU, &g);
  const Tensor x = Tensor::randn({16, 64}, DType::f32, kCPU, &g);
  fp8_linear(x, w, Tensor(), WeightLayout::out_in, state);
  const void* first = state->weight(w, WeightLayout::out_in).data.data_ptr();
  const std::vector<float> first_values =
      state->weight(w, WeightLayout::out_in).data.to(DType::f32).to_float_vector();
  const int64_t cache = state->weight_cache_bytes();
  EXPECT_EQ(cache, 32 * 64 + 4);
  // A second micro-batch of the same step: no new quantization, the same FP8 bytes.
  const auto before = memory_stats(kCPU).at("allocation.all.allocated");
  fp8_linear(x, w, Tensor(), WeightLayout::out_in, state);
  EXPECT_EQ(state->weight(w, WeightLayout::out_in).data.data_ptr(), first);
  // The micro-batch allocates its input's FP8 copy, scale and output, not the weight's.
  EXPECT_EQ(memory_stats(kCPU).at("allocation.all.allocated") - before, 3);
  fp8.next_step();
  w.copy_(mul(w, Tensor::full({1}, 2.0)));
  // The next step quantizes the updated weight (at scale 1: no end_forward ran).
  EXPECT_EQ(state->weight(w, WeightLayout::out_in).data.to(DType::f32).to_float_vector(),
            w.to(DType::f8_e4m3fn, Overflow::saturate).to(DType::f32).to_float_vector());
  EXPECT_NE(state->weight(w, WeightLayout::out_in).data.to(DType::f32).to_float_vector(),
            first_values);
  EXPECT_EQ(state->weight_cache_bytes(), cache);
}

TEST(Fp8Linear, SavesItsInputInFp8UnlessToldToKeepTheOriginal) {
  Generator g(2);
  const Tensor w = Tensor::randn({32, 128}, DType::f32, kCPU, &g).set_requires_grad(true);
  int64_t held[2];
  for (const bool original : {false, true}) {
    Fp8Training fp8(delayed_recipe(), original);
    auto state = fp8.new_layer(kCPU);
    Tensor x = Tensor::randn({64, 128}, DType::f32, kCPU, &g);
    const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
    Tensor y = fp8_linear(x, w, Tensor(), WeightLayout::out_in, state);
    x = Tensor();  // what stays is what backward keeps
    held[original] = static_cast<int64_t>(memory_allocated(kCPU)) - before;
    backward(sum(y));
    EXPECT_TRUE(w.grad().defined());
    w.set_grad(Tensor());
  }
  // FP8: 64 x 128 bytes and a 4-byte scale (a 512-byte block); original: the f32 input.
  EXPECT_EQ(held[1] - held[0], 64 * 128 * 4 - (64 * 128 + 512));
}

TEST(Fp8Linear, DelayedScalesMoveOnlyAtTheEndOfForwardAndOfBackward) {
  Fp8Training fp8(delayed_recipe());
  auto state = fp8.new_layer(kCPU);
  Generator g(3);
  const Tensor w = Tensor::randn({16, 32}, DType::f32, kCPU, &g).set_requires_grad(true);
  const Tensor x = Tensor::randn({16, 32}, DType::f32, kCPU, &g).set_requires_grad(true);
  const Tensor dy = Tensor::randn({16, 16}, DType::f32, kCPU, &g);
  Tensor y = fp8_linear(x, w, Tensor(), WeightLayout::out_in, state);
  EXPECT_EQ(state->forward_scale().to_float_vector(), (std::vector<float>{1.0f, 1.0f}));
  fp8.end_forward();
  const std::vector<float> forward = state->forward_scale().to_float_vector();
  EXPECT_EQ(forward[0], 448.0f / amax_of(x));
  EXPECT_EQ(forward[1], 448.0f / amax_of(w));
  backward(y, dy);
  EXPECT_EQ(state->backward_scale().to_float_vector(), std::vector<float>{1.0f});
  fp8.end_backward();
  EXPECT_EQ(state->backward_scale().to_float_vector()[0], 57344.0f / amax_of(dy));
  EXPECT_EQ(state->forward_scale().to_float_vector(), forward);
}

TEST(Fp8Linear, EvaluationLeavesTheTrainingStateAlone) {
  Fp8Training fp8(delayed_recipe());
  auto state = fp8.new_layer(kCPU);
  const Tensor w = Tensor::full({16, 16}, 0.5);
  const Tensor x = Tensor::full({16, 16}, 1e-9);  // underflows: counted only in training
  {
    NoGradGuard no_grad;
    fp8_linear(x, w, Tensor(), WeightLayout::out_in, state);
  }
  EXPECT_EQ(state->weight_cache_bytes(), 0);  // the weight was quantized for that call only
  EXPECT_EQ(fp8.take_counts(), (std::pair<int64_t, int64_t>{0, 0}));
  fp8.end_forward();  // nothing recorded: the scales stay
  EXPECT_EQ(state->forward_scale().to_float_vector(), (std::vector<float>{1.0f, 1.0f}));
  fp8_linear(x, w, Tensor(), WeightLayout::out_in, state);
  EXPECT_EQ(state->weight_cache_bytes(), 16 * 16 + 4);
  EXPECT_EQ(fp8.take_counts(), (std::pair<int64_t, int64_t>{0, 256}));
}

TEST(Fp8Linear, EveryRecipeStaysCloseToTheFp32Linear) {
  Generator g(4);
  const Tensor w = Tensor::randn({48, 64}, DType::f32, kCPU, &g);
  const Tensor b = Tensor::randn({48}, DType::f32, kCPU, &g);
  const Tensor x = Tensor::randn({32, 64}, DType::f32, kCPU, &g);
  const std::vector<float> want = linear(x, w, b).to_float_vector();
  for (const Fp8RecipeKind kind : {Fp8RecipeKind::delayed, Fp8RecipeKind::current,
                                   Fp8RecipeKind::mxfp8, Fp8RecipeKind::block}) {
    Fp8Recipe r;
    r.kind = kind;
    Fp8Training fp8(r);
    auto state = fp8.new_layer(kCPU);
    // Delayed scaling's first step runs at scale 1; the second with scales from the first.
    fp8_linear(x, w, b, WeightLayout::out_in, state);
    fp8.end_forward();
    const std::vector<float> got =
        fp8_linear(x, w, b, WeightLayout::out_in, state).to_float_vector();
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    // E4M3 operands: 2^-4 relative rounding at most per value, far less on average.
    EXPECT_LT(std::sqrt(err / norm), 0.05) << fp8_recipe_kind_name(kind);
  }
}

TEST(Fp8Linear, CountsOverflowsAgainstAStaleDelayedScale) {
  Fp8Training fp8(delayed_recipe());
  auto state = fp8.new_layer(kCPU);
  const Tensor w = Tensor::full({16, 16}, 0.5);
  fp8_linear(Tensor::full({16, 16}, 1.0), w, Tensor(), WeightLayout::out_in, state);
  fp8.end_forward();  // input scale 448: a later x of 100 overflows
  EXPECT_EQ(fp8.take_counts(), (std::pair<int64_t, int64_t>{0, 0}));
  Tensor x = Tensor::full({16, 16}, 1.0);
  x.narrow(0, 0, 1).fill_(100.0);
  x.narrow(0, 1, 1).fill_(1e-9);
  fp8_linear(x, w, Tensor(), WeightLayout::out_in, state);
  EXPECT_EQ(fp8.take_counts(), (std::pair<int64_t, int64_t>{16, 16}));
  EXPECT_EQ(fp8.take_counts(), (std::pair<int64_t, int64_t>{0, 0}));
}

}  // namespace
}  // namespace headroom
