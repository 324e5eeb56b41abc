// What the trainer sees of a model: a causal language model with HF parameter names, built from
// its config (GPT-2 or Llama).
#pragma once

#include <cstdint>
#include <memory>

#include "core/generator.h"
#include "nn/block_runner.h"
#include "nn/layers.h"
#include "nn/model_config.h"
#include "nn/module.h"
#include "nn/sequence_boundaries.h"

namespace headroom {

class CausalLM : public Module {
 public:
  // input_ids [B, T] (i64 / i32) -> logits [B, T, vocab]. `sequences`: the sequences packed in
  // each row (nn/sequence_boundaries.h), none attending to another and each one's positions
  // starting at 0; by default one a row.
  virtual Tensor forward(const Tensor& input_ids, const SequenceBoundaries& sequences = {}) = 0;
  // Mean cross-entropy of next-token `targets` [B, T] (-100 = ignore), through the fused LM head
  // and loss: the [B, T, vocab] logits are never materialised. `target_count` >= 0: the targets
  // that are not -100, counted by the caller (Note [Targets counted by the caller]). A packed
  // batch's targets are -100 at each sequence's last token (TRL's labels -100 where position_ids
  // == 0, shifted), so no sequence is scored on the next one's first token.
  virtual Tensor loss(const Tensor& input_ids, const Tensor& targets, int64_t target_count = -1,
                      const SequenceBoundaries& sequences = {}) = 0;
  virtual HfConfig config() const = 0;
  // The token embedding (HF's get_input_embeddings: GPT-2's wte, Llama's embed_tokens).
  virtual Embedding& input_embeddings() = 0;
  // Names of parameters that share another's tensor (GPT-2's lm_head.weight): not saved.
  virtual std::vector<std::string> tied_parameter_names() const { return {}; }
  // The number of transformer blocks (n_layer, num_hidden_layers).
  virtual int64_t num_blocks() const = 0;
  // The dotted-name prefix of block `layer`'s parameters ("transformer.h.3.", "model.layers.3.").
  virtual std::string block_prefix(int64_t layer) const = 0;
  // HF's _init_weights for the parameter `name`: matrices drawn from `generator` (which the
  // caller advances in named_parameters order, as the constructor does), norm weights 1, biases
  // 0. load_pretrained uses it to initialise one tensor at a time in its training dtype.
  virtual void init_parameter(const std::string& name, const Tensor& p,
                              Generator& generator) const = 0;

  // How the blocks and their projections run; empty runners call them directly. See
  // Note [Block runners] (memsave's enable_gradient_checkpointing sets them).
  void set_block_runners(BlockRunners runners) { *runners_ = std::move(runners); }
  const BlockRunners& block_runners() const { return *runners_; }

 protected:
  // Shared with the blocks, which read it at every forward.
  const BlockRunners* runners() const { return runners_.get(); }

 private:
  std::unique_ptr<BlockRunners> runners_ = std::make_unique<BlockRunners>();
};

// Puts `run` innermost of `model`'s block runners: every call of block `layer`'s forward — the
// model's, and a recompute by a runner around it (a checkpoint) — becomes run(layer, forward,
// x). Parameter offload and ZeRO-3 put a block's weights in place for its forward this way.
void wrap_block_forwards(CausalLM& model, BlockRunner run);

// A model with HF's initialisation drawn from a generator seeded with `seed`.
std::unique_ptr<CausalLM> make_causal_lm(const HfConfig& config, Device device = kCPU,
                                         uint64_t seed = 0);

}  // namespace headroom
