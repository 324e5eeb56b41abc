// GPT-2 (HF GPT2LMHeadModel): learned positions, pre-LayerNorm blocks, GELU (tanh) MLP, Conv1D
// weights ([in, out]), LM head tied to the token embedding.
#pragma once

#include <memory>
#include <vector>

#include "core/generator.h"
#include "nn/block_runner.h"
#include "nn/causal_lm.h"
#include "nn/layers.h"

namespace headroom {

class GPT2Attention : public Module {
 public:
  // runners: the model's (Note [Block runners]); null runs the projections directly.
  GPT2Attention(const GPT2Config& config, Device device, const BlockRunners* runners = nullptr);
  // [B, T, D], before HF's resid_dropout, which the block applies with its residual add.
  Tensor forward(const Tensor& x, const SequenceBoundaries& sequences = {}) const;
  // The dtype c_attn converts x to (AdaptableLinear::input_dtype).
  std::optional<DType> input_dtype() const { return c_attn_.input_dtype(); }

 private:
  const GPT2Config config_;
  const BlockRunners* runners_;
  Linear& c_attn_;
  Linear& c_proj_;
};

class GPT2MLP : public Module {
 public:
  GPT2MLP(const GPT2Config& config, Device device, const BlockRunners* runners = nullptr);
  // Before resid_dropout, as GPT2Attention's; through the model's mlp runner.
  Tensor forward(const Tensor& x) const;
  Tensor project(const Tensor& x) const;  // c_fc, GELU, c_proj
  std::optional<DType> input_dtype() const { return c_fc_.input_dtype(); }

 private:
  const GPT2Config config_;
  const BlockRunners* runners_;
  Linear& c_fc_;
  Linear& c_proj_;
};

class GPT2Block : public Module {
 public:
  GPT2Block(const GPT2Config& config, Device device, const BlockRunners* runners = nullptr);
  Tensor forward(const Tensor& x, const SequenceBoundaries& sequences = {}) const;

 private:
  const GPT2Config config_;
  LayerNorm& ln_1_;
  GPT2Attention& attn_;
  LayerNorm& ln_2_;
  GPT2MLP& mlp_;
};

// HF's "transformer": embeddings, blocks, final norm. Returns the final hidden states.
class GPT2Model : public Module {
 public:
  GPT2Model(const GPT2Config& config, Device device, const BlockRunners* runners = nullptr);
  // sequences' position_ids index wpe (positions restart at 0 for each packed sequence).
  Tensor forward(const Tensor& input_ids, const SequenceBoundaries& sequences = {}) const;
  const Embedding& wte() const { return wte_; }
  Embedding& wte() { return wte_; }

 private:
  const GPT2Config config_;
  const BlockRunners* runners_;
  Embedding& wte_;
  Embedding& wpe_;
  std::vector<GPT2Block*> blocks_;
  LayerNorm* ln_f_ = nullptr;
};

class GPT2LMHeadModel : public CausalLM {
 public:
  GPT2LMHeadModel(const GPT2Config& config, Device device = kCPU, uint64_t seed = 0);
  Tensor forward(const Tensor& input_ids, const SequenceBoundaries& sequences = {}) override;
  Tensor loss(const Tensor& input_ids, const Tensor& targets, int64_t target_count = -1,
              const SequenceBoundaries& sequences = {}) override;
  // The output of ln_f, [B, T, D].
  Tensor hidden_states(const Tensor& input_ids, const SequenceBoundaries& sequences = {});
  HfConfig config() const override { return config_; }
  Embedding& input_embeddings() override { return transformer_.wte(); }
  std::vector<std::string> tied_parameter_names() const override { return {"lm_head.weight"}; }
  int64_t num_blocks() const override { return config_.n_layer; }
  std::string block_prefix(int64_t layer) const override {
    return "transformer.h." + std::to_string(layer) + ".";
  }
  void init_parameter(const std::string& name, const Tensor& p,
                      Generator& generator) const override;

 private:
  const GPT2Config config_;
  GPT2Model& transformer_;
  TiedLinear& lm_head_;  // wte's weight; an adapter may wrap it
};

}  // namespace headroom
