// The tiled MLP (Note [Tiled MLP]) on small Llama and GPT-2 models: the loss and every gradient
// but the MLP weights' bit for bit equal to the untiled run's, with and without checkpointing
// and LoRA; the MLP weights' to fp32's rounding of their sum over the tokens; one gradient per
// parameter for its hooks; and the backward's peak down by the intermediates of all but one tile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "memory/device_memory.h"
#include "memsave/checkpoint_policy.h"
#include "memsave/tiled_mlp.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "peft/lora_model.h"

namespace headroom {
namespace {

constexpr int64_t kBatch = 2, kTokens = 64;

LlamaConfig small_llama() {
  LlamaConfig c;
  c.vocab_size = 128, c.hidden_size = 64, c.intermediate_size = 192;
  c.num_hidden_layers = 3, c.num_attention_heads = 4, c.num_key_value_heads = 2;
  c.max_position_embeddings = kTokens;
  return c;
}

GPT2Config small_gpt2() {
  GPT2Config c;
  c.vocab_size = 128, c.n_positions = kTokens, c.n_embd = 64, c.n_layer = 2, c.n_head = 4;
  return c;
}

struct Setup {
  int64_t tile = 0;  // 0: untiled
  std::string checkpointing = "none";
  bool lora = false;
};

struct StepResult {
  Tensor loss;
  std::map<std::string, Tensor> grads;
  std::map<std::string, int> hook_calls;
  int64_t backward_peak = 0;  // beyond what was allocated before the forward
};

StepResult train_step(const HfConfig& config, const Setup& setup, Device device = kCPU) {
  auto model = make_causal_lm(config, device, /*seed=*/17);
  if (setup.lora) {
    LoraConfig lora;
    lora.r = 4, lora.lora_alpha = 8.0, lora.target_modules = {"all-linear"};
    lora.init_lora_weights = LoraInit::random;  // B non-zero: every adapter has a gradient
    Generator generator(5);
    apply_lora(*model, lora, &generator);
  }
  enable_gradient_checkpointing(*model, parse_checkpoint_policy(setup.checkpointing));
  if (setup.tile > 0) enable_tiled_mlp(*model, setup.tile);
  StepResult run;
  for (const auto& [name, p] : model->named_parameters()) {
    if (!p.requires_grad()) continue;
    register_post_accumulate_grad_hook(p, [&run, n = name](const Tensor&) { ++run.hook_calls[n]; });
  }
  std::vector<int64_t> ids, targets;
  for (int64_t i = 0; i < kBatch * kTokens; ++i) {
    ids.push_back((i * 37 + 11) % 128);
    targets.push_back((i * 53 + 5) % 128);
  }
  const bool meta = device.type == DeviceType::meta;
  const Tensor id_tensor = meta ? Tensor::empty({kBatch, kTokens}, DType::i64, device)
                                : Tensor::from_ints(ids, {kBatch, kTokens});
  const Tensor target_tensor = meta ? id_tensor : Tensor::from_ints(targets, {kBatch, kTokens});
  manual_seed(1234);  // GPT-2's dropout masks
  const auto before = static_cast<int64_t>(memory_allocated(device));
  run.loss = model->loss(id_tensor, target_tensor);
  reset_peak_memory_stats(device);
  backward(run.loss);
  run.backward_peak = static_cast<int64_t>(max_memory_allocated(device)) - before;
  for (const auto& [name, p] : model->named_parameters()) {
    if (p.requires_grad()) run.grads[name] = p.grad();
  }
  return run;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(),
                     static_cast<size_t>(a.nbytes())) == 0;
}

// The MLP's own parameters (gate / up / down, c_fc / c_proj, their adapters).
bool in_mlp(const std::string& name) { return name.find(".mlp.") != std::string::npos; }

void expect_equal_steps(const StepResult& reference, const StepResult& tiled,
                        const std::string& what) {
  EXPECT_TRUE(same_bits(reference.loss, tiled.loss)) << what;
  ASSERT_EQ(reference.grads.size(), tiled.grads.size()) << what;
  for (const auto& [name, expected] : reference.grads) {
    const Tensor& got = tiled.grads.at(name);
    ASSERT_TRUE(got.defined()) << what << ": " << name;
    if (!in_mlp(name)) {
      EXPECT_TRUE(same_bits(expected, got)) << what << ": " << name;
      continue;
    }
    // A weight's gradient sums a product over the 128 tokens; the tiles add that sum in another
    // order, which moves it by at most 2 * 128 * 2^-24 of the sum of the products' magnitudes.
    // That sum is not at hand; the largest gradient times 4 (cancellation in a sum of 128
    // products of random weights stays below it in these models) stands for it.
    const std::vector<float> e = expected.to_float_vector(), g = got.to_float_vector();
    float largest = 0.0f;
    for (float v : e) largest = std::max(largest, std::fabs(v));
    const double bound = 2.0 * 128 * std::ldexp(1.0, -24) * 4.0 * largest;
    double worst = 0.0;
    for (size_t i = 0; i < e.size(); ++i) worst = std::max(worst, std::fabs(double{e[i]} - g[i]));
    EXPECT_LE(worst, bound) << what << ": " << name;
  }
}

TEST(TiledMlp, LlamaEqualsTheUntiledMlp) {
  for (const char* checkpointing : {"none", "full", "selective"}) {
    for (bool lora : {false, true}) {
      const StepResult reference = train_step(small_llama(), {0, checkpointing, lora});
      // 48 tokens a tile: 128 tokens in 3 tiles, the last of 32, the second across the batch's
      // rows. Outputs are the same bit for bit when each tile starts at a multiple of the rows
      // oneDNN's sgemm computes together (16 with AVX-512, 24 or 16 with AVX2): a tile of 24
      // puts rows 16..23 in a narrower block, summed in another order (mlp_tile_tokens rounds
      // tiles to 64 tokens for this).
      const StepResult tiled = train_step(small_llama(), {48, checkpointing, lora});
      expect_equal_steps(reference, tiled,
                         str_cat("checkpointing ", checkpointing, lora ? ", LoRA" : ""));
    }
  }
}

TEST(TiledMlp, Gpt2EqualsTheUntiledMlp) {
  expect_equal_steps(train_step(small_gpt2(), {0, "none", false}),
                     train_step(small_gpt2(), {48, "none", false}), "GPT-2");
}

TEST(TiledMlp, EachParameterGetsOneGradientPerBackward) {
  const StepResult tiled = train_step(small_llama(), {24, "full", true});
  ASSERT_FALSE(tiled.hook_calls.empty());
  for (const auto& [name, g] : tiled.grads) EXPECT_EQ(tiled.hook_calls.at(name), 1) << name;
}

TEST(TiledMlp, BackwardKeepsOneTileOfIntermediates) {
  // Full checkpointing, so that the MLP's recompute is what backward holds: untiled, gate, up,
  // their product and its gradients are 128 x 192 floats each; tiled, 24 x 192.
  const StepResult untiled = train_step(small_llama(), {0, "full", false});
  const StepResult tiled = train_step(small_llama(), {24, "full", false});
  const int64_t intermediate = kBatch * kTokens * 192 * 4;
  EXPECT_LT(tiled.backward_peak, untiled.backward_peak - intermediate) << untiled.backward_peak;
  // The meta device (the planner) allocates what the CPU does.
  EXPECT_EQ(train_step(small_llama(), {24, "full", false}, kMeta).backward_peak,
            tiled.backward_peak);
}

TEST(TiledMlp, TileTokens) {
  EXPECT_EQ(mlp_tile_tokens(100000, 4096), 4032);  // 25 tiles of 4000, rounded to 64
  EXPECT_EQ(mlp_tile_tokens(4096, 4096), 4096);    // one tile: untiled
  EXPECT_EQ(mlp_tile_tokens(100, 64), 64);
  EXPECT_EQ(mlp_tile_tokens(131072, 4096), 4096);  // Arctic's 32 shards
  EXPECT_EQ(mlp_tile_tokens(131072, 4096, 1000), 1000);
  EXPECT_THROW(mlp_tile_tokens(10, 4, -1), ValueError);
}

}  // namespace
}  // namespace headroom
