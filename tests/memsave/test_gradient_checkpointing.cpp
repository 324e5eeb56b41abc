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
  int64_t kept = 0;            // allocated after the forward, beyond what was there before
  int64_t backward_peak = 0;   // peak allocated during backward, beyond the same base
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

void expect_same_step(const StepResult& reference, const StepResult& run,
                      const std::string& policy) {
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

int64_t round_to_block(int64_t bytes) { return (bytes + 511) / 512 * 512; }  // kMinBlockSize

// The allocator-rounded bytes of the parameters of block 0 (their gradients' bytes).
int64_t block_parameter_bytes(const HfConfig& config, const std::string& prefix) {
  auto model = make_causal_lm(config, Device{DeviceType::meta, 0}, 1);
  int64_t bytes = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    if (name.starts_with(prefix)) bytes += round_to_block(static_cast<int64_t>(p.nbytes()));
  }
  return bytes;
}

// Bytes a block saves for backward without checkpointing, what selective keeps of them, and the
// figures of its backward.
struct BlockBytes {
  int64_t saved;                 // every activation the block's nodes keep (its input not counted)
  int64_t selective;             // the projections' outputs that selective keeps instead
  int64_t selective_recomputed;  // what selective's recompute brings back: the saved ones it
                                 // does not keep
  int64_t input;                 // the block's input, kept by its first norm or by the checkpoint
  int64_t params;                // its parameters' gradients
  int64_t head;  // the change in allocated bytes from the loss's backward to the last block's
  int64_t top;   // what a block's backward holds at its highest point beyond its activations
};

// GPT-2 block, fp32, T x D activations of B x T x D: ln_1 out, c_attn out (3), attention out
// (laid out as [B, T, H, D], so c_proj's input is a view of it), h, ln_2 out, c_fc out (4), gelu
// out (4): 15; plus the
// mean and rstd of both LayerNorms ([B, T] each) and the attention's lse ([B, H, T]).
// Selective keeps c_attn's (3), attn.c_proj's (1) and c_fc's (4) outputs; attn.c_proj's is not
// among the saved ones (the residual add saves nothing), so its recompute brings back 15 - 7.
// Backward: ln_f's backward adds its input's gradient, its weight's and bias's, and the last
// block's resid dropout the MLP branch's gradient; it frees its saved input, mean and rstd and
// the fused loss's gradient of the hidden states. A block's highest point is mlp.c_proj's
// backward: its input's gradient ([B, T, 4D]), its weight's and bias's.
BlockBytes gpt2_block_bytes(const GPT2Config& c) {
  const int64_t btd = kBatch * kTokens * c.n_embd * kF32, bt = kBatch * kTokens * kF32;
  const int64_t saved = 15 * btd + 4 * bt + c.n_head * bt;
  const int64_t norm_grads = 2 * round_to_block(c.n_embd * kF32);
  return {.saved = saved,
          .selective = 8 * btd,
          .selective_recomputed = saved - 7 * btd,
          .input = btd,
          .params = block_parameter_bytes(c, "transformer.h.0."),
          .head = (btd + norm_grads + btd) - (btd + btd + 2 * bt),
          .top = 4 * btd + 4 * c.n_embd * c.n_embd * kF32 + round_to_block(c.n_embd * kF32)};
}

// Llama block (fp32, grouped-query): input_layernorm out, rotated q, rotated k and v (kv width),
// attention out, o_proj's input, h, post-norm out; gate, up and the SwiGLU out (intermediate);
// two rstd [B, T] and lse [B, Hq, T]. Selective keeps q, k, v, o, gate and up, of which v, gate
// and up are among the saved ones. Backward: the final norm's backward adds its input's gradient
// and its weight's and frees its saved input and rstd and the fused loss's gradient of the
// hidden states. A block's highest point is the SwiGLU's backward: down_proj's weight gradient,
// its input's gradient and the SwiGLU's two input gradients (intermediate), the saved SwiGLU out
// freed.
BlockBytes llama_block_bytes(const LlamaConfig& c) {
  const int64_t bt = kBatch * kTokens * kF32, btd = bt * c.hidden_size;
  const int64_t btkv = bt * c.effective_num_key_value_heads() * c.effective_head_dim();
  const int64_t bti = bt * c.intermediate_size;
  const int64_t saved = 6 * btd + 2 * btkv + 3 * bti + 2 * bt + c.num_attention_heads * bt;
  return {.saved = saved,
          .selective = 2 * btd + 2 * btkv + 2 * bti,
          .selective_recomputed = saved - (btkv + 2 * bti),
          .input = btd,
          .params = block_parameter_bytes(c, "model.layers.0."),
          .head = (btd + round_to_block(c.hidden_size * kF32)) - (btd + btd + bt),
          .top = c.hidden_size * c.intermediate_size * kF32 + bti + 2 * bti - bti};
}

// The exact peak of backward: blocks run backward from the last, and block b is at its highest
// with what the policy recomputed for it held, what earlier blocks' backward left (their
// parameters' gradients, less what they freed: their input and their kept activations) and
// `top`; the peak is the largest of these over b.
int64_t expected_backward_peak(const std::string& policy_name, int64_t kept,
                               const BlockBytes& block) {
  const CheckpointPolicy policy = parse_checkpoint_policy(policy_name);
  int64_t peak = 0, left_by_later_blocks = 0;
  for (int64_t b = kLayers - 1; b >= 0; --b) {
    int64_t recomputed = 0, freed = block.input + block.saved;
    if (policy.kind == CheckpointPolicy::Kind::selective) {
      recomputed = block.selective_recomputed, freed = block.input + block.selective;
    } else if (policy.checkpoints_block(b)) {
      recomputed = block.saved, freed = block.input;
    }
    peak = std::max(peak, kept + block.head + left_by_later_blocks + recomputed + block.top);
    left_by_later_blocks += block.params - freed;
  }
  return peak;
}

// What each policy keeps after the forward and the peak of its backward, exactly: the none figure
// less what each policy drops, and the peak from the figures above.
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
  for (const char* policy : {"none", "full", "every_2", "every_3", "selective"}) {
    const StepResult& r = runs[policy];
    EXPECT_EQ(r.backward_peak, expected_backward_peak(policy, r.kept, block)) << policy;
  }
  // Backward never holds more than what the forward kept, all the gradients and one block's
  // recomputed activations; the order of the peaks follows the policies. every_3 keeps as much
  // as every_2 but peaks higher: its first recompute (block 3) comes while every other block's
  // activations are still held, every_2's (block 2) after block 3's are freed.
  for (const char* policy : {"full", "every_2", "every_3", "selective"}) {
    const StepResult& r = runs[policy];
    EXPECT_LE(r.backward_peak, r.kept + r.after_backward + block.saved) << policy;
  }
  EXPECT_LT(runs["full"].backward_peak, runs["every_2"].backward_peak);
  EXPECT_LT(runs["every_2"].backward_peak, runs["every_3"].backward_peak);
  EXPECT_LT(runs["every_3"].backward_peak, runs["none"].backward_peak);
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
      EXPECT_NE(std::string(e.what()).find(str_cat("'", bad,
                                                   "' is not one of none, full, "
                                                   "every_N (N >= 1, e.g. every_2) or selective")),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace headroom
