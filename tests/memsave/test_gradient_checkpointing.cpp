// Checkpointing policies on small GPT-2 and Llama models with dropout on: gradients bit for bit
// equal to a run without checkpointing, and the activation memory each policy keeps, to the byte.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <map>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "memory/device_memory.h"
#include "memsave/checkpoint_policy.h"
#include "nn/gpt2.h"
#include "nn/llama.h"

namespace headroom {
namespace {

constexpr int64_t kBatch = 2, kTokens = 64, kLayers = 4;
// Every activation below is a multiple of 512 bytes, the allocator's rounding, so the byte
// counts are sums of tensor sizes.
constexpr int64_t kF32 = 4;

GPT2Config small_gpt2() {
  GPT2Config c;
  c.vocab_size = 128, c.n_positions = kTokens, c.n_embd = 64, c.n_layer = kLayers, c.n_head = 4;
  c.resid_pdrop = 0.1, c.embd_pdrop = 0.1, c.attn_pdrop = 0.1;
  return c;
}

LlamaConfig small_llama() {
  LlamaConfig c;
  c.vocab_size = 128, c.hidden_size = 64, c.intermediate_size = 128;
  c.num_hidden_layers = kLayers, c.num_attention_heads = 4, c.num_key_value_heads = 2;
  c.max_position_embeddings = kTokens, c.attention_dropout = 0.1;
  return c;
}

struct StepResult {
  Tensor loss;
  std::vector<std::pair<std::string, Tensor>> grads;
  int64_t kept = 0;           // allocated after the forward, beyond what was there before
  int64_t backward_peak = 0;  // peak allocated during backward, beyond the same base
  int64_t after_backward = 0;  // the gradients (and the loss) once backward is over
};

StepResult train_step(const HfConfig& config, const std::string& policy, Device device = kCPU) {
  auto model = make_causal_lm(config, device, /*seed=*/17);
  enable_gradient_checkpointing(*model, parse_checkpoint_policy(policy));
  std::vector<int64_t> ids_values, target_values;
  for (int64_t i = 0; i < kBatch * kTokens; ++i) {
    ids_values.push_back((i * 37 + 11) % 128);
    target_values.push_back((i * 53 + 5) % 128);
  }
  const bool meta = device.type == DeviceType::meta;
  const Tensor ids = meta ? Tensor::empty({kBatch, kTokens}, DType::i64, device)
                          : Tensor::from_ints(ids_values, {kBatch, kTokens});
  const Tensor targets = meta ? ids : Tensor::from_ints(target_values, {kBatch, kTokens});
  manual_seed(1234);  // the dropout masks
  StepResult run;
  const auto before = static_cast<int64_t>(memory_allocated(device));
  run.loss = model->loss(ids, targets);
  run.kept = static_cast<int64_t>(memory_allocated(device)) - before;
  reset_peak_memory_stats(device);
  backward(run.loss);
  run.backward_peak = static_cast<int64_t>(max_memory_allocated(device)) - before;
  run.after_backward = static_cast<int64_t>(memory_allocated(device)) - before;
  for (const auto& [name, p] : model->named_parameters()) run.grads.emplace_back(name, p.grad());
  return run;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(),
                     static_cast<size_t>(a.nbytes())) == 0;
}

void expect_same_step(const StepResult& reference, const StepResult& run, const std::string& policy) {
  EXPECT_TRUE(same_bits(reference.loss, run.loss)) << policy;
  ASSERT_EQ(reference.grads.size(), run.grads.size());
  for (size_t i = 0; i < run.grads.size(); ++i) {
    EXPECT_TRUE(same_bits(reference.grads[i].second, run.grads[i].second))
        << policy << ": " << run.grads[i].first;
  }
}

const std::vector<std::string> kPolicies = {"full", "every_2", "every_3", "selective"};

TEST(GradientCheckpointing, Gpt2GradientsEqualNoCheckpointingBitForBit) {
  const StepResult reference = train_step(small_gpt2(), "none");
  for (const std::string& policy : kPolicies) {
    expect_same_step(reference, train_step(small_gpt2(), policy), policy);
  }
}

TEST(GradientCheckpointing, LlamaGradientsEqualNoCheckpointingBitForBit) {
  const StepResult reference = train_step(small_llama(), "none");
  for (const std::string& policy : kPolicies) {
    expect_same_step(reference, train_step(small_llama(), policy), policy);
  }
}

// Bytes a block saves for backward without checkpointing, and what selective keeps of them.
struct BlockBytes {
  int64_t saved;      // every activation the block's nodes keep (its input not counted)
  int64_t selective;  // the projections' outputs that selective keeps instead
};

// GPT-2 block, fp32, T x D activations of B x T x D: ln_1 out, c_attn out (3), attention out,
// its [B, T, D] copy (c_proj's input), h, ln_2 out, c_fc out (4), gelu out (4): 16; plus the
// mean and rstd of both LayerNorms ([B, T] each) and the attention's lse ([B, H, T]).
// Selective keeps c_attn's (3), attn.c_proj's (1) and c_fc's (4) outputs.
BlockBytes gpt2_block_bytes(const GPT2Config& c) {
  const int64_t btd = kBatch * kTokens * c.n_embd * kF32, bt = kBatch * kTokens * kF32;
  return {16 * btd + 4 * bt + c.n_head * bt, 8 * btd};
}

// Llama block (fp32, grouped-query): input_layernorm out, rotated q, rotated k and v (kv width),
// attention out, o_proj's input, h, post-norm out; gate, up and the SwiGLU out (intermediate);
// two rstd [B, T] and lse [B, Hq, T]. Selective keeps q, k, v, o, gate and up.
BlockBytes llama_block_bytes(const LlamaConfig& c) {
  const int64_t bt = kBatch * kTokens * kF32, btd = bt * c.hidden_size;
  const int64_t btkv = bt * c.effective_num_key_value_heads() * c.effective_head_dim();
  const int64_t bti = bt * c.intermediate_size;
  return {6 * btd + 2 * btkv + 3 * bti + 2 * bt + c.num_attention_heads * bt,
          2 * btd + 2 * btkv + 2 * bti};
}

// What each policy keeps after the forward, exactly: the none figure less what it drops.
void expect_activation_memory(const HfConfig& config, const BlockBytes& block) {
  std::map<std::string, StepResult> runs;
  for (const char* policy : {"none", "full", "every_2", "every_3", "selective"}) {
    runs[policy] = train_step(config, policy);
    std::cout << policy << ": kept after forward " << runs[policy].kept << " B, backward peak "
              << runs[policy].backward_peak << " B, gradients " << runs[policy].after_backward
              << " B\n";
  }
  const int64_t none = runs["none"].kept;
  EXPECT_EQ(runs["full"].kept, none - kLayers * block.saved);
  EXPECT_EQ(runs["every_2"].kept, none - 2 * block.saved);  // blocks 0 and 2
  EXPECT_EQ(runs["every_3"].kept, none - 2 * block.saved);  // blocks 0 and 3
  EXPECT_EQ(runs["selective"].kept, none - kLayers * (block.saved - block.selective));
  // Backward never holds more than what the forward kept, all the gradients and one block's
  // recomputed activations; the order of the peaks follows the policies.
  for (const char* policy : {"full", "every_2", "every_3", "selective"}) {
    const StepResult& r = runs[policy];
    EXPECT_LE(r.backward_peak, r.kept + r.after_backward + block.saved) << policy;
  }
  EXPECT_LT(runs["full"].backward_peak, runs["every_2"].backward_peak);
  EXPECT_LT(runs["every_2"].backward_peak, runs["none"].backward_peak);
  EXPECT_LT(runs["full"].backward_peak, runs["selective"].backward_peak);
  EXPECT_LT(runs["selective"].backward_peak, runs["none"].backward_peak);
}

TEST(GradientCheckpointing, Gpt2ActivationMemoryPerPolicy) {
  expect_activation_memory(small_gpt2(), gpt2_block_bytes(small_gpt2()));
}

TEST(GradientCheckpointing, LlamaActivationMemoryPerPolicy) {
  expect_activation_memory(small_llama(), llama_block_bytes(small_llama()));
}

// The meta device, the planner's dry run, gives the CPU's figures for every policy, recompute
// included.
TEST(GradientCheckpointing, MetaDeviceGivesTheCpuFigures) {
  for (const char* policy : {"none", "full", "every_2", "selective"}) {
    for (const HfConfig& config : {HfConfig(small_gpt2()), HfConfig(small_llama())}) {
      const StepResult cpu = train_step(config, policy);
      const StepResult meta = train_step(config, policy, Device{DeviceType::meta, 0});
      EXPECT_EQ(meta.kept, cpu.kept) << policy;
      EXPECT_EQ(meta.backward_peak, cpu.backward_peak) << policy;
      EXPECT_EQ(meta.after_backward, cpu.after_backward) << policy;
    }
  }
}

TEST(GradientCheckpointing, DisableRestoresPlainBlocks) {
  auto model = make_causal_lm(small_gpt2(), kCPU, 1);
  enable_gradient_checkpointing(*model, parse_checkpoint_policy("selective"));
  EXPECT_TRUE(model->block_runners().block);
  EXPECT_TRUE(model->block_runners().matmul);
  disable_gradient_checkpointing(*model);
  EXPECT_FALSE(model->block_runners().block);
  EXPECT_FALSE(model->block_runners().matmul);
  enable_gradient_checkpointing(*model, parse_checkpoint_policy("none"));
  EXPECT_FALSE(model->block_runners().block);
}

TEST(CheckpointPolicy, ParsesTheOptionValues) {
  using Kind = CheckpointPolicy::Kind;
  EXPECT_EQ(parse_checkpoint_policy("none"), (CheckpointPolicy{Kind::none}));
  EXPECT_EQ(parse_checkpoint_policy("full"), (CheckpointPolicy{Kind::full}));
  EXPECT_EQ(parse_checkpoint_policy("selective"), (CheckpointPolicy{Kind::selective}));
  const CheckpointPolicy every3 = parse_checkpoint_policy("every_3");
  EXPECT_EQ(every3, (CheckpointPolicy{Kind::every_n, 3}));
  EXPECT_EQ(every3.name(), "every_3");
  EXPECT_TRUE(every3.checkpoints_block(0));
  EXPECT_FALSE(every3.checkpoints_block(2));
  EXPECT_TRUE(every3.checkpoints_block(3));
  EXPECT_TRUE(parse_checkpoint_policy("every_1").checkpoints_block(5));
  for (const char* bad : {"every_0", "every_", "every_2x", "every_-1", "Full", "", "fast"}) {
    try {
      parse_checkpoint_policy(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(str_cat("'", bad, "' is not one of none, full, "
                                                   "every_N (N >= 1, e.g. every_2) or selective")),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace headroom
