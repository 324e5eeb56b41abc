// Llama (HF LlamaForCausalLM): RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP,
// untied LM head (unless tie_word_embeddings); with the variations of the Llama-shaped families
// (LlamaConfig::Family): biases, q / k norms, sliding windows, fused projections, and Gemma 2 / 3's
// block (Gemma2ForCausalLM, Gemma3ForCausalLM): embeddings times sqrt(hidden), (1 + w) RMSNorms
// also after attention and around the MLP, a GeGLU MLP, query_pre_attn_scalar, soft-capped
// attention scores and logits, and Gemma 3's local RoPE base on its sliding layers.
#pragma once

#include <vector>

#include "nn/causal_lm.h"
#include "nn/layers.h"

namespace headroom {

class LlamaAttention : public Module {
 public:
  // runners: the model's (Note [Block runners]); null runs the projections directly. layer: the
  // decoder layer's index, which chooses its sliding window (LlamaConfig::attention_window).
  LlamaAttention(const LlamaConfig& config, Device device, const BlockRunners* runners = nullptr,
                 int64_t layer = 0);
  // sequences' position_ids rotate q and k (positions restart at 0 for each packed sequence).
  Tensor forward(const Tensor& x, const SequenceBoundaries& sequences = {}) const;
  // The dtype q, k and v_proj (or qkv_proj) all convert x to (common_input_dtype).
  std::optional<DType> input_dtype() const {
    return qkv_proj_ ? qkv_proj_->input_dtype() : common_input_dtype({q_proj_, k_proj_, v_proj_});
  }

 private:
  const LlamaConfig config_;
  const BlockRunners* runners_;
  const std::optional<int64_t> window_;
  const RopeParameters rope_;  // the layer's (LlamaConfig::layer_rope)
  // q_proj, k_proj and v_proj, or Phi-3's qkv_proj (LlamaConfig::fused_projections), q rows
  // first, then k's, then v's.
  Linear* q_proj_ = nullptr;
  Linear* k_proj_ = nullptr;
  Linear* v_proj_ = nullptr;
  Linear* qkv_proj_ = nullptr;
  Linear* o_proj_ = nullptr;
  const RMSNorm* q_norm_ = nullptr;  // Qwen3's and Gemma 3's (LlamaConfig::qk_norm), else null
  const RMSNorm* k_norm_ = nullptr;
};

class LlamaMLP : public Module {
 public:
  LlamaMLP(const LlamaConfig& config, Device device, const BlockRunners* runners = nullptr);
  // Through the model's mlp runner (a tiled one runs project over tiles of the tokens).
  Tensor forward(const Tensor& x) const;
  // The gate, up and down projections of x.
  Tensor project(const Tensor& x) const;
  std::optional<DType> input_dtype() const {
    return gate_up_proj_ ? gate_up_proj_->input_dtype()
                         : common_input_dtype({gate_proj_, up_proj_});
  }

 private:
  const BlockRunners* runners_;
  const bool geglu_;  // Gemma's gelu_pytorch_tanh gate (its only hidden_activation), else SiLU's
  // gate_proj and up_proj, or Phi-3's gate_up_proj, gate rows first.
  Linear* gate_proj_ = nullptr;
  Linear* up_proj_ = nullptr;
  Linear* gate_up_proj_ = nullptr;
  Linear* down_proj_ = nullptr;
};

class LlamaDecoderLayer : public Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& config, Device device, const BlockRunners* runners = nullptr,
                    int64_t layer = 0);
  Tensor forward(const Tensor& x, const SequenceBoundaries& sequences = {}) const;

 private:
  RMSNorm* input_layernorm_ = nullptr;
  LlamaAttention* self_attn_ = nullptr;
  // Llama's norm before the MLP; Gemma's norm of the attention's output.
  RMSNorm* post_attention_layernorm_ = nullptr;
  LlamaMLP* mlp_ = nullptr;
  // Gemma's norms before the MLP and of its output; null for the other families.
  RMSNorm* pre_feedforward_layernorm_ = nullptr;
  RMSNorm* post_feedforward_layernorm_ = nullptr;
};

// HF's "model": embeddings, layers, final norm. Returns the final hidden states.
class LlamaModel : public Module {
 public:
  LlamaModel(const LlamaConfig& config, Device device, const BlockRunners* runners = nullptr);
  Tensor forward(const Tensor& input_ids, const SequenceBoundaries& sequences = {}) const;
  const Embedding& embed_tokens() const { return embed_tokens_; }
  Embedding& embed_tokens() { return embed_tokens_; }

 private:
  const LlamaConfig config_;
  const BlockRunners* runners_;
  Embedding& embed_tokens_;
  std::vector<LlamaDecoderLayer*> layers_;
  RMSNorm* norm_ = nullptr;
};

class LlamaForCausalLM : public CausalLM {
 public:
  LlamaForCausalLM(const LlamaConfig& config, Device device = kCPU, uint64_t seed = 0);
  Tensor forward(const Tensor& input_ids, const SequenceBoundaries& sequences = {}) override;
  Tensor loss(const Tensor& input_ids, const Tensor& targets, int64_t target_count = -1,
              const SequenceBoundaries& sequences = {}) override;
  Tensor hidden_states(const Tensor& input_ids, const SequenceBoundaries& sequences = {});
  HfConfig config() const override { return config_; }
  Embedding& input_embeddings() override { return model_.embed_tokens(); }
  std::vector<std::string> tied_parameter_names() const override;
  int64_t num_blocks() const override { return config_.num_hidden_layers; }
  std::string block_prefix(int64_t layer) const override {
    return "model.layers." + std::to_string(layer) + ".";
  }
  void init_parameter(const std::string& name, const Tensor& p,
                      Generator& generator) const override;

 private:
  const Tensor& head_weight() const;

  const LlamaConfig config_;
  LlamaModel& model_;
  Linear* lm_head_ = nullptr;        // null when tied to the embedding
  AdaptableLinear* head_ = nullptr;  // lm_head_, or the tied one (an adapter may wrap either)
};

}  // namespace headroom
