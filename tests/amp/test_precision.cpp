// Precision recipes: names, and the bytes per parameter each recipe holds on a GPT-2 between
// steps and during the step (the cast cache), through allocator statistics.
#include <gtest/gtest.h>

#include <memory>

#include "amp/autocast.h"
#include "amp/precision.h"
#include "autograd/engine.h"
#include "memory/device_memory.h"
#include "nn/gpt2.h"
#include "ops/autocast.h"
#include "optim/adamw.h"

namespace headroom {
namespace {

size_t block_bytes(int64_t numel, DType dtype) {
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  return (bytes + 511) / 512 * 512;  // the CachingAllocator's kMinBlockSize
}

GPT2Config small_gpt2() {
  GPT2Config config;
  config.vocab_size = 512;
  config.n_positions = 64;
  config.n_embd = 128;
  config.n_layer = 2;
  config.n_head = 4;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  return config;
}

TEST(Precision, NamesParseAndRecipesAreWhatTheGuidesTabulate) {
  // Each recipe's name is the `precision` option's spelling of it.
  for (const char* name : {"fp32", "bf16", "fp16", "pure_bf16", "pure_bf16+kahan"}) {
    EXPECT_EQ(parse_precision(name).name(), name);
  }
  EXPECT_EQ(parse_precision("bf16").precision, Precision::bf16);
  EXPECT_EQ(parse_precision("no").precision, Precision::fp32);
  const PrecisionRecipe kahan = parse_precision("pure_bf16+kahan");
  EXPECT_EQ(kahan.precision, Precision::pure_bf16);
  EXPECT_EQ(kahan.param_dtype, DType::bf16);
  EXPECT_TRUE(kahan.kahan_summation);
  EXPECT_FALSE(kahan.stochastic_rounding);
  EXPECT_TRUE(parse_precision("pure_bf16").stochastic_rounding);
  EXPECT_THROW(parse_precision("fp8"), ValueError);
  EXPECT_THROW(parse_precision("bf16+kahan"), ValueError);  // f32 weights: nothing to compensate
  EXPECT_THROW(precision_recipe(Precision::bf16, /*kahan_summation=*/true), ValueError);
  EXPECT_EQ(precision_recipe(Precision::fp32).adamw_bytes_per_parameter(), 16);
  EXPECT_EQ(precision_recipe(Precision::bf16).adamw_bytes_per_parameter(), 16);
  EXPECT_EQ(precision_recipe(Precision::fp16).adamw_bytes_per_parameter(), 16);
  EXPECT_TRUE(precision_recipe(Precision::fp16).loss_scaling);
  EXPECT_EQ(precision_recipe(Precision::pure_bf16).adamw_bytes_per_parameter(), 8);
  EXPECT_EQ(precision_recipe(Precision::pure_bf16, true).adamw_bytes_per_parameter(), 10);
  EXPECT_EQ(precision_recipe(Precision::pure_bf16, true).name(), "pure_bf16+kahan");
}

struct RecipeMemory {
  size_t between_steps = 0;  // allocated after step 2, gradients kept (zero_grad not yet called)
  size_t expected = 0;       // sum over parameters of weight, grad and state blocks
  size_t cast_cache = 0;     // bytes the cast cache holds at the end of the forward pass
  size_t expected_casts = 0;
  int64_t parameters = 0;
};

RecipeMemory measure(const PrecisionRecipe& recipe, Device device) {
  RecipeMemory m;
  const int64_t batch = 2, context = 64;
  const Tensor ids = device.type == DeviceType::meta
                         ? Tensor::empty({batch, context}, DType::i64, device)
                         : Tensor::zeros({batch, context}, DType::i64, device);
  const size_t base = memory_allocated(device);
  auto model = std::make_unique<GPT2LMHeadModel>(small_gpt2(), device, 7);
  model->to(recipe.param_dtype);
  AdamW optimizer(model->named_parameters(), {.lr = 1e-3,
                                              .state_dtype = recipe.optimizer_state_dtype,
                                              .kahan_summation = recipe.kahan_summation,
                                              .stochastic_rounding = recipe.stochastic_rounding});
  for (int step = 0; step < 2; ++step) {
    optimizer.zero_grad();
    Tensor loss;
    {
      std::optional<Autocast> region;
      if (recipe.autocast_dtype) region.emplace(device.type, recipe.autocast_dtype);
      loss = model->loss(ids, ids);
      m.cast_cache = autocast_cache_stats().bytes;
    }
    backward(loss);
    optimizer.step();
  }
  m.between_steps = memory_allocated(device) - base;
  for (const auto& [name, p] : model->named_parameters()) {
    m.parameters += p.numel();
    const int64_t n = p.numel();
    m.expected += 2 * block_bytes(n, recipe.param_dtype);  // weight and gradient
    m.expected += 2 * block_bytes(n, recipe.optimizer_state_dtype);
    if (recipe.kahan_summation) m.expected += block_bytes(n, DType::bf16);
    // Linear weights and biases and the tied LM head are cast; positions and norms are not.
    const bool cast = recipe.autocast_dtype && name.find("wpe") == std::string::npos &&
                      name.find("ln_") == std::string::npos;
    if (cast) m.expected_casts += static_cast<size_t>(n) * dtype_size(*recipe.autocast_dtype);
  }
  return m;
}

TEST(Precision, EachRecipeHoldsItsBytesPerParameterBetweenSteps) {
  for (const PrecisionRecipe& recipe :
       {precision_recipe(Precision::fp32), precision_recipe(Precision::bf16),
        precision_recipe(Precision::fp16), precision_recipe(Precision::pure_bf16),
        precision_recipe(Precision::pure_bf16, true)}) {
    const RecipeMemory m = measure(recipe, kCPU);
    EXPECT_EQ(m.between_steps, m.expected) << recipe.name();
    const double per_parameter =
        static_cast<double>(m.between_steps) / static_cast<double>(m.parameters);
    // Block rounding of the small tensors (biases, norms) adds under 1%.
    EXPECT_NEAR(per_parameter, recipe.adamw_bytes_per_parameter(),
                0.01 * recipe.adamw_bytes_per_parameter())
        << recipe.name();
    EXPECT_EQ(m.cast_cache, m.expected_casts) << recipe.name();
  }
}

TEST(Precision, MetaDryRunHoldsTheSameBytes) {
  for (const PrecisionRecipe& recipe :
       {precision_recipe(Precision::bf16), precision_recipe(Precision::pure_bf16, true)}) {
    const RecipeMemory cpu = measure(recipe, kCPU);
    const RecipeMemory meta = measure(recipe, Device{DeviceType::meta, 0});
    EXPECT_EQ(cpu.between_steps, meta.between_steps) << recipe.name();
    EXPECT_EQ(cpu.cast_cache, meta.cast_cache) << recipe.name();
  }
}

}  // namespace
}  // namespace headroom
