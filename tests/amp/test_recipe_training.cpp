// Training under each precision recipe: gradient accumulation equals the big batch, and the
// same small GPT-2 reaches the fp32 run's loss within 2% in bf16 autocast, fp16 with dynamic loss
// scaling, and pure bf16 (stochastic rounding, and Kahan).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <optional>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/precision.h"
#include "autograd/engine.h"
#include "nn/gpt2.h"
#include "nn/tiny_text.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"

namespace headroom {
namespace {

using test_data::tiny_text_batch;
using test_data::tiny_text_gpt2;

Tensor recipe_loss(GPT2LMHeadModel& model, const PrecisionRecipe& recipe, const Tensor& ids,
                   const Tensor& targets) {
  std::optional<Autocast> region;
  if (recipe.autocast_dtype) region.emplace(DeviceType::cpu, recipe.autocast_dtype);
  return model.loss(ids, targets);
}

TEST(RecipeTraining, AccumulatedMicroBatchGradientsEqualTheBigBatch) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const PrecisionRecipe recipe = precision_recipe(precision);
    GPT2LMHeadModel model(tiny_text_gpt2(), kCPU, 42);
    const auto [ids, targets] = tiny_text_batch(0, 8, 32);
    backward(recipe_loss(model, recipe, ids, targets));
    std::vector<std::vector<float>> big;
    for (const Tensor& p : model.parameters()) {
      big.push_back(p.grad().to_float_vector());
      p.set_grad(Tensor());
    }
    const int micro = 4;
    for (int m = 0; m < micro; ++m) {
      const Tensor ids_m = narrow(ids, 0, 2 * m, 2), targets_m = narrow(targets, 0, 2 * m, 2);
      backward(scale(recipe_loss(model, recipe, ids_m, targets_m), 1.0 / micro));
    }
    const std::vector<Tensor> params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float> acc = params[i].grad().to_float_vector();
      double max_abs = 0.0, max_diff = 0.0;
      for (size_t j = 0; j < acc.size(); ++j) {
        max_abs = std::max(max_abs, std::abs(static_cast<double>(big[i][j])));
        max_diff = std::max(max_diff, std::abs(static_cast<double>(acc[j]) - big[i][j]));
      }
      // fp32: summation order only. bf16: the micro-batches' bf16 GEMM outputs round
      // differently from the big batch's (2^-8 relative).
      const double tolerance = precision == Precision::fp32 ? 1e-5 : 1e-2;
      EXPECT_LE(max_diff, tolerance * max_abs + 1e-7)
          << precision_name(precision) << " parameter " << i;
    }
  }
}

TEST(RecipeTraining, ClippingUnderLossScalingSeesTheUnscaledGradients) {
  const PrecisionRecipe fp16 = precision_recipe(Precision::fp16);
  GPT2LMHeadModel model(tiny_text_gpt2(), kCPU, 42);
  AdamW optimizer(model.named_parameters());
  const auto [ids, targets] = tiny_text_batch(0, 4, 32);
  backward(recipe_loss(model, fp16, ids, targets));
  const double unscaled = grad_norm(optimizer);
  optimizer.zero_grad();
  GradScaler scaler;
  backward(scaler.scale(recipe_loss(model, fp16, ids, targets)));
  EXPECT_NEAR(grad_norm(optimizer), unscaled * 65536.0, 1e-3 * unscaled * 65536.0);
  scaler.unscale_(optimizer);
  // f16 activations round differently with and without the scale in their gradients.
  EXPECT_NEAR(grad_norm(optimizer), unscaled, 1e-3 * unscaled);
  const double before_clip = clip_grad_norm_(optimizer, 0.5 * unscaled);
  EXPECT_NEAR(before_clip, unscaled, 1e-3 * unscaled);
  EXPECT_NEAR(grad_norm(optimizer), 0.5 * unscaled, 1e-3 * unscaled);
  EXPECT_TRUE(scaler.step(optimizer));
}

struct RunResult {
  std::vector<float> losses;
  int skipped_steps = 0;
  float final_scale = 0.0f;
};

RunResult train(const PrecisionRecipe& recipe, int steps) {
  GPT2LMHeadModel model(tiny_text_gpt2(), kCPU, 42);
  model.to(recipe.param_dtype);
  AdamW optimizer(model.named_parameters(), {.lr = 3e-3,
                                             .weight_decay = 0.0,
                                             .state_dtype = recipe.optimizer_state_dtype,
                                             .kahan_summation = recipe.kahan_summation,
                                             .stochastic_rounding = recipe.stochastic_rounding});
  GradScaler scaler({.enabled = recipe.loss_scaling});
  LRScheduler scheduler(
      optimizer,
      {.type = SchedulerType::linear, .num_training_steps = steps, .warmup_ratio = 0.05});
  RunResult result;
  for (int step = 0; step < steps; ++step) {
    const auto [ids, targets] = tiny_text_batch(step, 8, 32);
    const Tensor loss = recipe_loss(model, recipe, ids, targets);
    result.losses.push_back(static_cast<float>(loss.item()));
    backward(scaler.scale(loss));
    scaler.unscale_(optimizer);  // clipping sees the true gradients (a no-op when disabled)
    clip_grad_norm_(optimizer, 1.0);
    if (!scaler.step(optimizer)) ++result.skipped_steps;
    scaler.update();
    scheduler.step();
    optimizer.zero_grad();
  }
  result.final_scale = scaler.get_scale();
  return result;
}

float tail_mean(const std::vector<float>& losses, size_t n) {
  float total = 0.0f;
  for (size_t i = losses.size() - n; i < losses.size(); ++i) total += losses[i];
  return total / static_cast<float>(n);
}

// The criterion, "final losses within 2% of fp32", is about a recipe not costing
// convergence: a recipe may end at most 2% above fp32's loss. Ending below it is no failure: the
// runs take different rounding paths through a loss that is still falling after 150 steps
// (pure_bf16+kahan ends ~1.75% below here), so the bound is one-sided.
TEST(RecipeTraining, EveryRecipeReachesTheFp32LossWithinTwoPercent) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  const int steps = 150;
  const RunResult fp32 = train(precision_recipe(Precision::fp32), steps);
  const float reference = tail_mean(fp32.losses, 20);
  EXPECT_LT(reference, 0.8f * std::log(256.0f)) << "fp32 did not learn";
  for (const PrecisionRecipe& recipe :
       {precision_recipe(Precision::bf16), precision_recipe(Precision::fp16),
        precision_recipe(Precision::pure_bf16), precision_recipe(Precision::pure_bf16, true)}) {
    const RunResult run = train(recipe, steps);
    const float tail = tail_mean(run.losses, 20);
    EXPECT_LE(tail, 1.02f * reference) << recipe.name() << " ends more than 2% above fp32";
    if (recipe.loss_scaling) {
      // The scale starts at 2^16 and may back off on an overflow, but the run is not skipping
      // its way through: at most a handful of steps are dropped.
      EXPECT_LE(run.skipped_steps, 3) << recipe.name();
      EXPECT_GE(run.final_scale, 1024.0f) << recipe.name();
    }
    std::printf("%-16s final loss %.4f (fp32 %.4f, %+.2f%%), skipped %d\n", recipe.name().c_str(),
                tail, reference, 100.0f * (tail - reference) / reference, run.skipped_steps);
  }
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace headroom
