// Llama as HF's modeling_llama defines it, on headroom's ops.
#include "nn/llama.h"

#include <cmath>

#include "core/dtype_convert.h"
#include "core/error.h"
#include "core/generator.h"
#include "ops/ops.h"

namespace headroom {

namespace {

std::unique_ptr<Linear> projection(int64_t in, int64_t out, bool bias, Device device) {
  return std::make_unique<Linear>(in, out, bias, WeightLayout::out_in, device);
}

// The family's RMSNorm over `dim` (Gemma's scales by 1 + w).
std::unique_ptr<RMSNorm> norm(const LlamaConfig& c, int64_t dim, Device device) {
  return std::make_unique<RMSNorm>(dim, c.rms_norm_eps, device, c.norm_weight_offset());
}

// Gemma's embedding scale as transformers applies it: sqrt(hidden) as an fp32 tensor, cast to the
// embedding's dtype (bf16: sqrt(3072) = 55.4256 becomes 55.5) before the product.
double embedding_normalizer(int64_t hidden, DType dtype) {
  const float value = static_cast<float>(std::sqrt(static_cast<double>(hidden)));
  if (dtype == DType::f32) return value;
  alignas(8) unsigned char rounded[8];
  float widened = 0.0f;
  convert_from_f32(&value, rounded, dtype, 1);
  convert_to_f32(rounded, dtype, &widened, 1);
  return widened;
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& c, Device device, const BlockRunners* runners,
                               int64_t layer)
    : config_(c),
      runners_(runners),
      window_(c.attention_window(layer)),
      rope_(c.layer_rope(layer)) {
  // Registered in transformers' Llama order (q, k, v, o), which fixes the parameter order.
  const int64_t q_size = c.num_attention_heads * c.effective_head_dim();
  const int64_t kv_size = c.effective_num_key_value_heads() * c.effective_head_dim();
  if (c.fused_projections()) {
    qkv_proj_ = &register_module(
        "qkv_proj", projection(c.hidden_size, q_size + 2 * kv_size, c.qkv_bias(), device));
  } else {
    q_proj_ = &register_module("q_proj", projection(c.hidden_size, q_size, c.qkv_bias(), device));
    k_proj_ = &register_module("k_proj", projection(c.hidden_size, kv_size, c.qkv_bias(), device));
    v_proj_ = &register_module("v_proj", projection(c.hidden_size, kv_size, c.qkv_bias(), device));
  }
  o_proj_ = &register_module("o_proj", projection(q_size, c.hidden_size, c.attention_bias, device));
  if (c.qk_norm()) {
    q_norm_ = &register_module("q_norm", norm(c, c.effective_head_dim(), device));
    k_norm_ = &register_module("k_norm", norm(c, c.effective_head_dim(), device));
  }
}

Tensor LlamaAttention::forward(const Tensor& x, const SequenceBoundaries& sequences) const {
  const int64_t b = x.size(0), t = x.size(1), hd = config_.effective_head_dim();
  const int64_t hq = config_.num_attention_heads, hkv = config_.effective_num_key_value_heads();
  // [B, T, H * D] as [B, H, T, D]; Qwen3 normalizes each head's D first, as transformers does
  // on the [B, T, H, D] view.
  auto heads = [&](const Tensor& y, int64_t h, const RMSNorm* norm = nullptr) {
    Tensor split = reshape(y, {b, t, h, hd});
    if (norm) split = norm->forward(split);
    return transpose(split, 1, 2);
  };
  // Phi-3's fused projection is sliced along its last dimension, q, k, v, as transformers does.
  std::vector<Tensor> qkv;
  if (qkv_proj_) {
    qkv = split(run_matmul(runners_, *qkv_proj_, x), {hq * hd, hkv * hd, hkv * hd}, -1);
  } else {
    qkv = {run_matmul(runners_, *q_proj_, x), run_matmul(runners_, *k_proj_, x),
           run_matmul(runners_, *v_proj_, x)};
  }
  const Tensor& positions = sequences.position_ids;
  const Tensor q = rotary_embedding(heads(qkv[0], hq, q_norm_), rope_, 0, positions);
  const Tensor k = rotary_embedding(heads(qkv[1], hkv, k_norm_), rope_, 0, positions);
  const Tensor v = heads(qkv[2], hkv);
  qkv.clear();
  const double p = is_training() ? config_.attention_dropout : 0.0;
  Tensor y = scaled_dot_product_attention(q, k, v, /*is_causal=*/true, config_.attention_scale(), p,
                                          nullptr, window_, config_.attn_logit_softcapping,
                                          sequences.attention);
  return run_matmul(runners_, *o_proj_, reshape(transpose(y, 1, 2), {b, t, hq * hd}));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c, Device device, const BlockRunners* runners)
    : runners_(runners), geglu_(c.gemma()) {
  const int64_t in = c.hidden_size, inter = c.intermediate_size;
  if (c.fused_projections()) {
    gate_up_proj_ = &register_module("gate_up_proj", projection(in, 2 * inter, c.mlp_bias, device));
  } else {
    gate_proj_ = &register_module("gate_proj", projection(in, inter, c.mlp_bias, device));
    up_proj_ = &register_module("up_proj", projection(in, inter, c.mlp_bias, device));
  }
  down_proj_ = &register_module("down_proj", projection(inter, in, c.mlp_bias, device));
}

Tensor LlamaMLP::forward(const Tensor& x) const {
  return run_mlp(
      runners_, *this, [this](const Tensor& in) { return project(in); }, x);
}

Tensor LlamaMLP::project(const Tensor& x) const {
  Tensor hidden;
  if (gate_up_proj_) {
    // Phi-3: chunk(2) of the fused output, gate first.
    const Tensor fused = run_matmul(runners_, *gate_up_proj_, x);
    const int64_t inter = fused.size(-1) / 2;
    const std::vector<Tensor> parts = split(fused, {inter, inter}, -1);
    hidden = swiglu(parts[0], parts[1]);
  } else {
    const Tensor gate = run_matmul(runners_, *gate_proj_, x);
    const Tensor up = run_matmul(runners_, *up_proj_, x);
    hidden = geglu_ ? geglu(gate, up) : swiglu(gate, up);
  }
  return run_matmul(runners_, *down_proj_, hidden);
}

// Registered in transformers' order, which fixes the parameter order: Llama's input_layernorm,
// self_attn, post_attention_layernorm, mlp; Gemma's self_attn, mlp, then its four norms.
LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, Device device,
                                     const BlockRunners* runners, int64_t layer) {
  auto attention = [&] {
    self_attn_ =
        &register_module("self_attn", std::make_unique<LlamaAttention>(c, device, runners, layer));
  };
  auto mlp = [&] {
    mlp_ = &register_module("mlp", std::make_unique<LlamaMLP>(c, device, runners));
  };
  auto hidden_norm = [&](const char* name) {
    return &register_module(name, norm(c, c.hidden_size, device));
  };
  if (c.gemma()) {
    attention();
    mlp();
    input_layernorm_ = hidden_norm("input_layernorm");
    post_attention_layernorm_ = hidden_norm("post_attention_layernorm");
    pre_feedforward_layernorm_ = hidden_norm("pre_feedforward_layernorm");
    post_feedforward_layernorm_ = hidden_norm("post_feedforward_layernorm");
  } else {
    input_layernorm_ = hidden_norm("input_layernorm");
    attention();
    post_attention_layernorm_ = hidden_norm("post_attention_layernorm");
    mlp();
  }
}

// Each norm before projections writes the dtype they convert it to (under autocast: one bf16
// tensor that q, k and v share, where three casts of an fp32 one would each be kept for
// backward). Gemma normalises each branch's output too, before the residual add. The norms that
// read the residual stream take it with them (Note [Residual norms] in ops/norm.h): the first
// the layer's input, the second the attention's add.
Tensor LlamaDecoderLayer::forward(const Tensor& x, const SequenceBoundaries& sequences) const {
  const ResidualNorm in = input_layernorm_->add_forward(x, Tensor(), self_attn_->input_dtype());
  const Tensor attn = self_attn_->forward(in.out, sequences);
  if (!pre_feedforward_layernorm_) {
    const ResidualNorm mid =
        post_attention_layernorm_->add_forward(in.sum, attn, mlp_->input_dtype());
    return add(mid.sum, mlp_->forward(mid.out));
  }
  const ResidualNorm mid = pre_feedforward_layernorm_->add_forward(
      in.sum, post_attention_layernorm_->forward(attn), mlp_->input_dtype());
  return add(mid.sum, post_feedforward_layernorm_->forward(mlp_->forward(mid.out)));
}

LlamaModel::LlamaModel(const LlamaConfig& c, Device device, const BlockRunners* runners)
    : config_(c),
      runners_(runners),
      embed_tokens_(register_module(
          "embed_tokens", std::make_unique<Embedding>(c.vocab_size, c.hidden_size, device))) {
  // nn.Embedding(vocab, hidden, padding_idx=pad_token_id), counted from the end when negative.
  if (c.pad_token_id && *c.pad_token_id >= -c.vocab_size && *c.pad_token_id < c.vocab_size) {
    embed_tokens_.set_padding_idx(*c.pad_token_id < 0 ? *c.pad_token_id + c.vocab_size
                                                      : *c.pad_token_id);
  }
  auto layers = std::make_unique<Module>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers_.push_back(&layers->register_child(
        std::to_string(i), std::make_unique<LlamaDecoderLayer>(c, device, runners, i)));
  }
  register_module("layers", std::move(layers));
  norm_ = &register_module("norm", norm(c, c.hidden_size, device));
}

Tensor LlamaModel::forward(const Tensor& input_ids, const SequenceBoundaries& sequences) const {
  if (input_ids.ndim() != 2) {
    throw ValueError(
        str_cat("LlamaModel: input_ids must be [batch, tokens], got ", input_ids.shape()));
  }
  check_sequence_boundaries("LlamaModel", input_ids, sequences);
  Tensor x = embed_tokens_.forward(input_ids);
  if (config_.gemma()) x = scale(x, embedding_normalizer(config_.hidden_size, x.dtype()));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LlamaDecoderLayer* layer = layers_[i];
    // The boundaries are copied into the forward: a recompute in backward may outlive the caller's.
    x = run_block(
        runners_, static_cast<int64_t>(i),
        [layer, sequences](const Tensor& in) { return layer->forward(in, sequences); }, x);
  }
  return norm_->forward(x);
}

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& c, Device device, uint64_t seed)
    : config_(c),
      model_(register_module("model", std::make_unique<LlamaModel>(c, device, runners()))) {
  if (c.num_attention_heads % c.effective_num_key_value_heads() != 0) {
    throw ValueError(str_cat("Llama config: num_attention_heads ", c.num_attention_heads,
                             " is not a multiple of num_key_value_heads ",
                             c.effective_num_key_value_heads()));
  }
  if (c.effective_head_dim() % 2 != 0) {
    throw ValueError(str_cat("Llama config: head_dim ", c.effective_head_dim(),
                             " must be even for rotary embeddings"));
  }
  if (c.pad_token_id && (*c.pad_token_id >= c.vocab_size || *c.pad_token_id < -c.vocab_size)) {
    throw ValueError(str_cat("Llama config: pad_token_id ", *c.pad_token_id,
                             " is outside the vocabulary (vocab_size ", c.vocab_size, ")"));
  }
  if (!c.tie_word_embeddings) {
    lm_head_ = &register_module("lm_head", projection(c.hidden_size, c.vocab_size, false, device));
    head_ = lm_head_;
  } else {
    head_ = &register_module("lm_head", std::make_unique<TiedLinear>(model_.embed_tokens()));
  }
  // HF's _init_weights: N(0, initializer_range) for Linear and Embedding weights, zero biases,
  // RMSNorm weights 1, and the embedding's padding_idx row (pad_token_id) zero. nn.Embedding
  // counts a negative padding_idx from the end and refuses one outside the vocabulary.
  Generator generator(seed);
  for (auto& [name, p] : named_parameters()) {
    if (p.ndim() == 2) init_parameter(name, p, generator);
  }
}

void LlamaForCausalLM::init_parameter(const std::string& name, const Tensor& p,
                                      Generator& generator) const {
  if (p.ndim() != 2) {
    // The 1-D weights are RMSNorm's: 1, or Gemma's 0 (it scales by 1 + w).
    const bool weight = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    p.fill_(weight ? 1.0 - config_.norm_weight_offset() : 0.0);
    return;
  }
  const LlamaConfig& c = config_;
  p.normal_(0.0, c.initializer_range, &generator);
  if (c.pad_token_id && name == "model.embed_tokens.weight") {
    const int64_t row = *c.pad_token_id < 0 ? *c.pad_token_id + c.vocab_size : *c.pad_token_id;
    p.narrow(0, row, 1).zero_();
  }
}

const Tensor& LlamaForCausalLM::head_weight() const {
  return lm_head_ ? lm_head_->weight() : model_.embed_tokens().weight();
}

std::vector<std::string> LlamaForCausalLM::tied_parameter_names() const {
  if (lm_head_) return {};
  return {"lm_head.weight"};
}

Tensor LlamaForCausalLM::hidden_states(const Tensor& input_ids,
                                       const SequenceBoundaries& sequences) {
  return model_.forward(input_ids, sequences);
}

Tensor LlamaForCausalLM::forward(const Tensor& input_ids, const SequenceBoundaries& sequences) {
  return output_head_logits(*head_, head_weight(), hidden_states(input_ids, sequences),
                            config_.final_logit_softcapping);
}

Tensor LlamaForCausalLM::loss(const Tensor& input_ids, const Tensor& targets, int64_t target_count,
                              const SequenceBoundaries& sequences) {
  return output_head_loss(*head_, head_weight(), hidden_states(input_ids, sequences), targets,
                          target_count, config_.final_logit_softcapping);
}

}  // namespace headroom
