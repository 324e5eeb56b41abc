// LoRA on headroom's models: config checks, injection and names, the forward's algebra, a frozen
// base that keeps no gradient, no optimizer state and no activation for a weight gradient
// (allocator statistics), training, adapter files and merging.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "io/safetensors.h"
#include "memory/device_memory.h"
#include "nn/gpt2.h"
#include "nn/llama.h"
#include "nn/tiny_text.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "peft/lora_layer.h"
#include "peft/lora_model.h"

namespace headroom {
namespace {

LlamaConfig tiny_llama() {
  LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

void expect_same(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.to_float_vector(), b.to_float_vector());
}

TEST(LoraConfig, ChecksNameTheFieldAndValue) {
  LoraConfig c;
  c.r = 0;
  EXPECT_EQ(error_of([&] { c.validate(); }), "lora_r: 0 must be > 0");
  c.r = 4;
  c.lora_dropout = 1.0;
  EXPECT_EQ(error_of([&] { c.validate(); }), "lora_dropout: 1 is outside [0, 1)");
  c.lora_dropout = 0.1;
  c.target_modules = {"q_proj", "all-linear"};
  EXPECT_NE(error_of([&] { c.validate(); }).find("'all-linear' must be the only entry"),
            std::string::npos);
  const LoraConfig plain{.r = 16, .lora_alpha = 32};
  const LoraConfig rslora{.r = 16, .lora_alpha = 32, .use_rslora = true};
  EXPECT_DOUBLE_EQ(plain.scaling(), 2.0);
  EXPECT_DOUBLE_EQ(rslora.scaling(), 8.0);
}

TEST(Lora, InjectsPeftDefaultsWithPeftNames) {
  GPT2LMHeadModel gpt2(test_data::tiny_text_gpt2(), kCPU, 1);
  const std::vector<std::string> wrapped = apply_lora(gpt2, LoraConfig{.r = 4});
  EXPECT_EQ(wrapped, (std::vector<std::string>{"transformer.h.0.attn.c_attn",
                                               "transformer.h.1.attn.c_attn"}));
  const auto trainable = lora_state_dict(gpt2);
  ASSERT_EQ(trainable.size(), 4u);
  EXPECT_EQ(trainable[0].first, "transformer.h.0.attn.c_attn.lora_A.weight");
  EXPECT_EQ(trainable[0].second.shape(), (Shape{4, 48}));
  EXPECT_EQ(trainable[1].first, "transformer.h.0.attn.c_attn.lora_B.weight");
  EXPECT_EQ(trainable[1].second.shape(), (Shape{144, 4}));
  // Kaiming-uniform(a=√5) A within ±1/√in, B zero.
  for (float v : trainable[0].second.to_float_vector())
    EXPECT_LE(std::fabs(v), 1 / std::sqrt(48.f));
  for (float v : trainable[1].second.to_float_vector()) EXPECT_EQ(v, 0.0f);
  EXPECT_FALSE(gpt2.parameter("transformer.h.0.attn.c_attn.weight").requires_grad());

  LlamaForCausalLM llama(tiny_llama(), kCPU, 1);
  EXPECT_EQ(apply_lora(llama, LoraConfig{}).size(), 4u);  // q_proj, v_proj of two layers
  LlamaForCausalLM all(tiny_llama(), kCPU, 1);
  // all-linear: the seven projections of each layer, never lm_head.
  EXPECT_EQ(apply_lora(all, LoraConfig{.target_modules = {"all-linear"}}).size(), 14u);
  for (const auto& [name, p] : lora_state_dict(all)) {
    EXPECT_EQ(name.find("lm_head"), std::string::npos) << name;
  }
}

// Phi-3's fused projections under PEFT's names; PEFT has no default targets for phi3, nor has
// headroom. Mistral takes Llama's.
TEST(Lora, Phi3TargetsItsFusedProjectionsByName) {
  LlamaConfig phi3 = tiny_llama();
  phi3.family = LlamaConfig::Family::phi3;
  LlamaForCausalLM model(phi3, kCPU, 1);
  EXPECT_NE(error_of([&] {
              apply_lora(model, LoraConfig{});
            }).find("lora_target_modules: Phi-3 has no default target modules"),
            std::string::npos);
  const std::vector<std::string> wrapped =
      apply_lora(model, LoraConfig{.r = 4, .target_modules = {"qkv_proj", "gate_up_proj"}});
  EXPECT_EQ(wrapped, (std::vector<std::string>{
                         "model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj",
                         "model.layers.1.self_attn.qkv_proj", "model.layers.1.mlp.gate_up_proj"}));
  // q rows (4 heads x 8), then k and v (2 heads x 8 each); gate then up (48 each).
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : lora_state_dict(model)) shapes.emplace(name, p.shape());
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.qkv_proj.lora_B.weight"), (Shape{64, 4}));
  EXPECT_EQ(shapes.at("model.layers.0.mlp.gate_up_proj.lora_B.weight"), (Shape{96, 4}));
  LlamaForCausalLM all(phi3, kCPU, 1);
  // all-linear: qkv_proj, o_proj, gate_up_proj, down_proj of each layer.
  EXPECT_EQ(apply_lora(all, LoraConfig{.target_modules = {"all-linear"}}).size(), 8u);

  LlamaConfig mistral = tiny_llama();
  mistral.family = LlamaConfig::Family::mistral;
  LlamaForCausalLM m(mistral, kCPU, 1);
  EXPECT_EQ(apply_lora(m, LoraConfig{}).size(), 4u);  // q_proj, v_proj of two layers
}

TEST(Lora, UnknownTargetsAndModulesAreRefusedByName) {
  GPT2LMHeadModel gpt2(test_data::tiny_text_gpt2(), kCPU, 1);
  EXPECT_EQ(error_of([&] { apply_lora(gpt2, LoraConfig{.target_modules = {"q_proj"}}); }),
            "lora_target_modules: 'q_proj' matches no linear layer of the gpt2 model (it has "
            "c_attn, c_fc, c_proj, lm_head)");
  GPT2LMHeadModel other(test_data::tiny_text_gpt2(), kCPU, 1);
  EXPECT_EQ(error_of([&] { apply_lora(other, LoraConfig{.modules_to_save = {"score"}}); }),
            "lora_modules_to_save: 'score' matches no module of the gpt2 model");
}

TEST(Lora, ForwardIsBasePlusScaledLowRankBranch) {
  LlamaForCausalLM model(tiny_llama(), kCPU, 3);
  Generator gen(5);
  LoraConfig config{.r = 3, .lora_alpha = 6, .init_lora_weights = LoraInit::random};
  apply_lora(model, config, &gen);
  const Tensor x = Tensor::randn({2, 5, 32}, DType::f32, kCPU);
  const Tensor w = model.parameter("model.layers.0.self_attn.q_proj.weight");
  const Tensor a = model.parameter("model.layers.0.self_attn.q_proj.lora_A.weight");
  const Tensor b = model.parameter("model.layers.0.self_attn.q_proj.lora_B.weight");
  Linear* q = nullptr;
  for (auto& [path, m] : model.named_modules()) {
    // The adapter shares its layer's path (its parameters sit beside the weight).
    if (path == "model.layers.0.self_attn.q_proj" && dynamic_cast<Linear*>(m)) {
      q = dynamic_cast<Linear*>(m);
    }
  }
  ASSERT_NE(q, nullptr);
  NoGradGuard no_grad;
  const Tensor expected = add(linear(x, w), scale(linear(linear(x, a), b), 2.0));
  expect_same(q->forward(x), expected);
}

TEST(Lora, AdapterStartsAsTheIdentityAndGptConv1dWorks) {
  GPT2LMHeadModel base(test_data::tiny_text_gpt2(), kCPU, 7);
  GPT2LMHeadModel lora(test_data::tiny_text_gpt2(), kCPU, 7);
  apply_lora(lora, LoraConfig{.r = 2, .target_modules = {"c_attn", "c_proj", "c_fc"}});
  const auto [ids, targets] = test_data::tiny_text_batch(0, 2, 16);
  NoGradGuard no_grad;
  expect_same(lora.forward(ids), base.forward(ids));
}

// Note [A frozen weight saves nothing for its gradient]: with W frozen, linear keeps W (for dx)
// and not x; with x constant (no grad) it keeps x (for dW). Measured as the bytes a graph holds
// once every other handle is gone.
TEST(Lora, FrozenLinearKeepsNoActivationForAWeightGradient) {
  const Device cpu = kCPU;
  auto held_by_graph = [&](bool weight_trainable) {
    const Tensor x0 = Tensor::randn({64, 32}, DType::f32, cpu).set_requires_grad(true);
    const Tensor w = Tensor::randn({16, 32}, DType::f32, cpu).set_requires_grad(weight_trainable);
    const size_t base = memory_allocated(cpu);
    Tensor y;
    {
      const Tensor h = scale(x0, 2.0);  // an activation only the linear could keep
      y = linear(h, w);
    }
    const size_t held = memory_allocated(cpu) - base;
    backward(sum(y));
    EXPECT_TRUE(x0.grad().defined());
    EXPECT_EQ(w.grad().defined(), weight_trainable);
    return static_cast<int64_t>(held);
  };
  const int64_t y_bytes = 64 * 16 * 4, h_bytes = 64 * 32 * 4;
  EXPECT_EQ(held_by_graph(false), y_bytes);
  EXPECT_EQ(held_by_graph(true), y_bytes + h_bytes);
}

// Note [A frozen base in the compute dtype]: the same loss and adapter gradients bit for bit
// under bf16 autocast, with the projections' weights stored in bf16.
TEST(Lora, FrozenProjectionsInTheComputeDtypeChangeNoBit) {
  auto run = [](bool store) {
    LlamaForCausalLM model(tiny_llama(), kCPU, 4);
    Generator gen(6);
    apply_lora(
        model,
        LoraConfig{
            .r = 4, .target_modules = {"q_proj", "up_proj"}, .init_lora_weights = LoraInit::random},
        &gen);
    int64_t saved = 0;
    if (store) saved = store_frozen_projections(model, DType::bf16);
    const auto [ids, targets] = test_data::tiny_text_batch(2, 2, 12);
    Tensor loss;
    {
      Autocast autocast(DeviceType::cpu, DType::bf16);
      loss = model.loss(ids, targets);
    }
    backward(loss);
    std::vector<float> out{static_cast<float>(loss.item()), static_cast<float>(saved)};
    for (const auto& [name, p] : lora_state_dict(model)) {
      for (float v : p.grad().to_float_vector()) out.push_back(v);
    }
    if (store) {
      EXPECT_EQ(model.parameter("model.layers.0.self_attn.k_proj.weight").dtype(), DType::bf16);
      EXPECT_EQ(model.parameter("model.layers.0.self_attn.q_proj.lora_A.weight").dtype(),
                DType::f32);
      EXPECT_EQ(model.parameter("lm_head.weight").dtype(), DType::f32);
      EXPECT_EQ(model.parameter("model.norm.weight").dtype(), DType::f32);
    }
    return out;
  };
  std::vector<float> fp32_base = run(false), bf16_base = run(true);
  // Seven projections of 32x32, 32x16 (k, v: GQA), 48x32 (gate, up, down) per layer, 2 bytes
  // each saved.
  const float saved = 2.0f * 2 * (2 * 32 * 32 + 2 * 16 * 32 + 3 * 48 * 32);
  EXPECT_EQ(bf16_base[1], saved);
  bf16_base[1] = fp32_base[1] = 0;
  EXPECT_EQ(bf16_base, fp32_base);
}

int64_t bytes_of(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  int64_t n = 0;
  for (const auto& [name, t] : tensors) n += static_cast<int64_t>(t.nbytes());
  return n;
}

TEST(Lora, TrainingMovesOnlyTheAdapterAndTheOptimizerSeesOnlyIt) {
  GPT2LMHeadModel model(test_data::tiny_text_gpt2(), kCPU, 11);
  apply_lora(model, LoraConfig{.r = 4, .lora_alpha = 8, .target_modules = {"c_attn", "c_fc"}});
  std::vector<std::pair<std::string, Tensor>> frozen_before;
  for (auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad())
      frozen_before.emplace_back(name, p.detach().to(DType::f32).contiguous());
  }
  const auto trainable = lora_state_dict(model);
  AdamW optimizer(trainable, AdamWOptions{.lr = 1e-2});
  // The loss on one fixed batch before and after: free of the noise of the training batches.
  const auto fixed = test_data::tiny_text_batch(100, 8, 16);  // a pair: clang 14 captures no
  auto fixed_loss = [&] {                                     // structured binding
    NoGradGuard no_grad;
    return model.loss(fixed.first, fixed.second).item();
  };
  const double before = fixed_loss();
  for (int step = 0; step < 20; ++step) {
    const auto [ids, targets] = test_data::tiny_text_batch(step, 4, 16);
    const Tensor loss = model.loss(ids, targets);
    backward(loss);
    for (auto& [name, p] : model.named_parameters()) {
      EXPECT_EQ(p.grad().defined(), p.requires_grad()) << name;
    }
    optimizer.step();
    optimizer.zero_grad();
  }
  EXPECT_LT(fixed_loss(), before - 0.1);
  for (const auto& [name, before] : frozen_before) expect_same(model.parameter(name), before);
  // AdamW's two moments, for the adapter only.
  int64_t state_bytes = 0;
  for (const auto& [name, t] : optimizer.state_dict().tensors) {
    if (t.numel() > 1) state_bytes += static_cast<int64_t>(t.nbytes());
  }
  EXPECT_EQ(state_bytes, 2 * bytes_of(trainable));
}

TEST(Lora, AdapterFilesRoundTripAndMergeGivesTheSameLogits) {
  const std::string dir = (std::filesystem::temp_directory_path() / "headroom_lora_files").string();
  std::filesystem::remove_all(dir);
  LlamaForCausalLM trained(tiny_llama(), kCPU, 2);
  Generator gen(9);
  LoraConfig config{.r = 4,
                    .lora_alpha = 16,
                    .target_modules = {"q_proj", "down_proj"},
                    .init_lora_weights = LoraInit::random};
  apply_lora(trained, config, &gen);
  save_lora_adapter(trained, config, dir);
  const SafetensorsFile file((std::filesystem::path(dir) / kAdapterWeightsFile).string());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_TRUE(file.contains("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"));
  EXPECT_EQ(file.size(), 8u);

  LlamaForCausalLM loaded(tiny_llama(), kCPU, 2);
  const LoraConfig read = load_lora_adapter(loaded, dir);
  EXPECT_EQ(read.r, 4);
  EXPECT_EQ(read.target_modules, config.target_modules);
  const auto [ids, targets] = test_data::tiny_text_batch(1, 2, 12);
  NoGradGuard no_grad;
  trained.eval();
  loaded.eval();
  const Tensor logits = trained.forward(ids);
  expect_same(loaded.forward(ids), logits);

  EXPECT_EQ(merge_lora(loaded), 4);
  for (const auto& [name, p] : loaded.named_parameters()) {
    EXPECT_EQ(name.find("lora_"), std::string::npos) << name;
  }
  const std::vector<float> merged = loaded.forward(ids).to_float_vector();
  const std::vector<float> want = logits.to_float_vector();
  // W + B@A in one GEMM rounds differently from base and adapter summed after: 1e-4 in fp32.
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(merged[i], want[i], 1e-4) << i;
  std::filesystem::remove_all(dir);
}

TEST(Lora, BadAdaptersAreRefusedNamingFileFieldAndValue) {
  const std::string dir = (std::filesystem::temp_directory_path() / "headroom_lora_bad").string();
  std::filesystem::remove_all(dir);
  LlamaForCausalLM model(tiny_llama(), kCPU, 2);
  const LoraConfig config{.r = 4};
  apply_lora(model, config);
  save_lora_adapter(model, config, dir);
  // Another base: a Llama of another width does not take these shapes.
  LlamaConfig wider = tiny_llama();
  wider.hidden_size = 64;
  LlamaForCausalLM other(wider, kCPU, 2);
  const std::string shape_error = error_of([&] { load_lora_adapter(other, dir); });
  EXPECT_NE(shape_error.find(kAdapterWeightsFile), std::string::npos) << shape_error;
  EXPECT_NE(shape_error.find("lora_A.weight"), std::string::npos) << shape_error;
  // A GPT-2 has no q_proj.
  GPT2LMHeadModel gpt2(test_data::tiny_text_gpt2(), kCPU, 1);
  const std::string base_error = error_of([&] { load_lora_adapter(gpt2, dir); });
  EXPECT_NE(base_error.find("adapter_config.json: target_modules: 'q_proj'"), std::string::npos)
      << base_error;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace headroom
