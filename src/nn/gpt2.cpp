// GPT-2 as HF's modeling_gpt2 defines it, on headroom's ops.
#include "nn/gpt2.h"

#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace headroom {

namespace {

Tensor maybe_dropout(const Tensor& x, double p, bool training) {
  return training && p > 0.0 ? dropout(x, p, true) : x;
}

}  // namespace

GPT2Attention::GPT2Attention(const GPT2Config& config, Device device, const BlockRunners* runners)
    : config_(config),
      runners_(runners),
      c_attn_(
          register_module("c_attn", std::make_unique<Linear>(config.n_embd, 3 * config.n_embd, true,
                                                             WeightLayout::in_out, device))),
      c_proj_(register_module("c_proj", std::make_unique<Linear>(config.n_embd, config.n_embd, true,
                                                                 WeightLayout::in_out, device))) {}

Tensor GPT2Attention::forward(const Tensor& x, const SequenceBoundaries& sequences) const {
  const int64_t b = x.size(0), t = x.size(1), d = config_.n_embd, h = config_.n_head;
  const std::vector<Tensor> qkv = split(run_matmul(runners_, c_attn_, x), {d, d, d}, -1);
  auto heads = [&](const Tensor& part) { return transpose(reshape(part, {b, t, h, d / h}), 1, 2); };
  const double p = is_training() ? config_.attn_pdrop : 0.0;
  Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                          /*is_causal=*/true, std::nullopt, p, nullptr,
                                          std::nullopt, std::nullopt, sequences.attention);
  y = reshape(transpose(y, 1, 2), {b, t, d});
  return run_matmul(runners_, c_proj_, y);
}

GPT2MLP::GPT2MLP(const GPT2Config& config, Device device, const BlockRunners* runners)
    : config_(config),
      runners_(runners),
      c_fc_(register_module(
          "c_fc", std::make_unique<Linear>(config.n_embd, config.effective_n_inner(), true,
                                           WeightLayout::in_out, device))),
      c_proj_(register_module(
          "c_proj", std::make_unique<Linear>(config.effective_n_inner(), config.n_embd, true,
                                             WeightLayout::in_out, device))) {}

Tensor GPT2MLP::forward(const Tensor& x) const {
  return run_mlp(
      runners_, *this, [this](const Tensor& in) { return project(in); }, x);
}

Tensor GPT2MLP::project(const Tensor& x) const {
  const Tensor hidden = gelu(run_matmul(runners_, c_fc_, x));
  return run_matmul(runners_, c_proj_, hidden);
}

GPT2Block::GPT2Block(const GPT2Config& config, Device device, const BlockRunners* runners)
    : config_(config),
      ln_1_(register_module(
          "ln_1", std::make_unique<LayerNorm>(config.n_embd, config.layer_norm_epsilon, device))),
      attn_(register_module("attn", std::make_unique<GPT2Attention>(config, device, runners))),
      ln_2_(register_module(
          "ln_2", std::make_unique<LayerNorm>(config.n_embd, config.layer_norm_epsilon, device))),
      mlp_(register_module("mlp", std::make_unique<GPT2MLP>(config, device, runners))) {}

// HF's resid_dropout ends GPT2Attention and GPT2MLP; here it is fused with the residual add
// that follows each (the same draws and values, one kernel instead of two). Each norm takes the
// residual stream with it (Note [Residual norms] in ops/norm.h): ln_1 the block's input, ln_2
// the attention's add, so backward adds the stream's gradients inside the norms' kernels.
Tensor GPT2Block::forward(const Tensor& x, const SequenceBoundaries& sequences) const {
  const double p = is_training() ? config_.resid_pdrop : 0.0;
  const ResidualNorm in = ln_1_.add_forward(x, Tensor(), attn_.input_dtype());
  const ResidualNorm mid = ln_2_.add_forward(in.sum, attn_.forward(in.out, sequences),
                                             mlp_.input_dtype(), {p, true, nullptr});
  return dropout_add(mid.sum, mlp_.forward(mid.out), p);
}

GPT2Model::GPT2Model(const GPT2Config& config, Device device, const BlockRunners* runners)
    : config_(config),
      runners_(runners),
      wte_(register_module("wte",
                           std::make_unique<Embedding>(config.vocab_size, config.n_embd, device))),
      wpe_(register_module(
          "wpe", std::make_unique<Embedding>(config.n_positions, config.n_embd, device))) {
  auto h = std::make_unique<Module>();
  for (int64_t i = 0; i < config.n_layer; ++i) {
    blocks_.push_back(&h->register_child(std::to_string(i),
                                         std::make_unique<GPT2Block>(config, device, runners)));
  }
  register_module("h", std::move(h));
  ln_f_ = &register_module(
      "ln_f", std::make_unique<LayerNorm>(config.n_embd, config.layer_norm_epsilon, device));
}

Tensor GPT2Model::forward(const Tensor& input_ids, const SequenceBoundaries& sequences) const {
  if (input_ids.ndim() != 2) {
    throw ValueError(
        str_cat("GPT2Model: input_ids must be [batch, tokens], got ", input_ids.shape()));
  }
  check_sequence_boundaries("GPT2Model", input_ids, sequences);
  const int64_t t = input_ids.size(1);
  // Packed sequences restart their positions: only the longest must fit wpe.
  const int64_t longest = sequences.packed() ? sequences.max_length : t;
  if (longest > config_.n_positions) {
    throw ValueError(str_cat("GPT2Model: ", longest, " tokens",
                             sequences.packed() ? " in a sequence" : "", " exceed n_positions ",
                             config_.n_positions));
  }
  // The positions are 0..t-1 with t checked above, or restart below t in each packed sequence:
  // no read back of a check.
  const Tensor positions = sequences.packed() ? sequences.position_ids
                                              : Tensor::arange(0, static_cast<double>(t), 1,
                                                               DType::i64, input_ids.device());
  Tensor x = add(wte_.forward(input_ids), wpe_.forward(positions, IdCheck::by_caller));
  x = maybe_dropout(x, config_.embd_pdrop, is_training());
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const GPT2Block* block = blocks_[i];
    // The boundaries are copied into the forward: a recompute in backward may outlive the caller's.
    x = run_block(
        runners_, static_cast<int64_t>(i),
        [block, sequences](const Tensor& in) { return block->forward(in, sequences); }, x);
  }
  return ln_f_->forward(x);
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& config, Device device, uint64_t seed)
    : config_(config),
      transformer_(
          register_module("transformer", std::make_unique<GPT2Model>(config, device, runners()))),
      lm_head_(register_module("lm_head", std::make_unique<TiedLinear>(transformer_.wte()))) {
  if (config.n_embd % config.n_head != 0) {
    throw ValueError(str_cat("GPT-2 config: n_embd ", config.n_embd,
                             " is not a multiple of n_head ", config.n_head));
  }
  Generator generator(seed);
  for (auto& [name, p] : named_parameters()) {
    if (p.ndim() == 2) init_parameter(name, p, generator);
  }
}

// HF's _init_weights: N(0, initializer_range) for Conv1D and embedding weights, zero biases,
// LayerNorm 1 / 0; the residual projections (c_proj) get std / sqrt(2 * n_layer).
void GPT2LMHeadModel::init_parameter(const std::string& name, const Tensor& p,
                                     Generator& generator) const {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (p.ndim() != 2) {
    p.fill_(ends_with(".weight") ? 1.0 : 0.0);  // the 1-D weights are LayerNorm's
    return;
  }
  const double std = config_.initializer_range;
  const bool residual = ends_with("c_proj.weight");
  p.normal_(0.0, residual ? std / std::sqrt(2.0 * static_cast<double>(config_.n_layer)) : std,
            &generator);
}

Tensor GPT2LMHeadModel::hidden_states(const Tensor& input_ids,
                                      const SequenceBoundaries& sequences) {
  return transformer_.forward(input_ids, sequences);
}

Tensor GPT2LMHeadModel::forward(const Tensor& input_ids, const SequenceBoundaries& sequences) {
  return output_head_logits(lm_head_, lm_head_.weight(), hidden_states(input_ids, sequences));
}

Tensor GPT2LMHeadModel::loss(const Tensor& input_ids, const Tensor& targets, int64_t target_count,
                             const SequenceBoundaries& sequences) {
  return output_head_loss(lm_head_, lm_head_.weight(), hidden_states(input_ids, sequences), targets,
                          target_count);
}

}  // namespace headroom
