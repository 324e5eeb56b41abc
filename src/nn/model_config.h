// The architecture hyper-parameters of the models, with HF's field names and defaults
// (GPT2Config, LlamaConfig). io/hf_config reads and writes them as config.json.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "backend/rope_parameters.h"
#include "core/dtype.h"

namespace headroom {

// Fields and defaults of transformers' GPT2Config (plus the PretrainedConfig ones GPT-2 uses).
// The summary_* fields of GPT2DoubleHeadsModel are not read.
struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;  // the context length (old files also carry n_ctx, the same value)
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  std::optional<int64_t> n_inner;  // the MLP width; null means 4 * n_embd
  std::string activation_function = "gelu_new";
  double resid_pdrop = 0.1;
  double embd_pdrop = 0.1;
  double attn_pdrop = 0.1;
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;
  bool reorder_and_upcast_attn = false;
  bool use_cache = true;
  bool tie_word_embeddings = true;
  std::optional<int64_t> bos_token_id = 50256;
  std::vector<int64_t> eos_token_id = {50256};  // one id or several; empty for null
  std::optional<int64_t> pad_token_id;
  DType torch_dtype = DType::f32;  // the dtype the weights were saved in

  int64_t effective_n_inner() const { return n_inner.value_or(4 * n_embd); }
  int64_t head_dim() const { return n_embd / n_head; }
  bool operator==(const GPT2Config&) const = default;
};

// Fields and defaults of transformers' LlamaConfig, which also describes the Llama-shaped
// families: Qwen2 / Qwen2.5 (family qwen2: bias on q / k / v, none on o_proj or the MLP; a
// sliding window on the layers past max_window_layers when use_sliding_window), Qwen3 (family
// qwen3: attention_bias on all four projections as Llama's, and q_norm / k_norm, an RMSNorm over
// each head of q and k before RoPE), Mistral (family mistral: no biases, sliding_window on every
// layer) and Phi-3 / 3.5 (family phi3: q / k / v fused in qkv_proj and gate / up in gate_up_proj,
// no biases, sliding_window on every layer), Gemma 2 and Gemma 3's text model (families gemma2 and
// gemma3_text: Gemma2Config / Gemma3TextConfig's fields below; see nn/llama.h).
struct LlamaConfig {
  enum class Family : uint8_t { llama, qwen2, qwen3, mistral, phi3, gemma2, gemma3_text };
  Family family = Family::llama;  // model_type
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  std::optional<int64_t> num_key_value_heads;  // null means num_attention_heads (no GQA)
  std::optional<int64_t> head_dim;             // null means hidden_size / num_attention_heads
  std::string hidden_act = "silu";             // Gemma's hidden_activation
  int64_t max_position_embeddings = 2048;
  double initializer_range = 0.02;
  double rms_norm_eps = 1e-6;
  bool use_cache = true;
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id = 1;
  std::vector<int64_t> eos_token_id = {2};  // Llama 3 lists several; empty for null
  int64_t pretraining_tp = 1;
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // rope_scaling (or rope_parameters); standard: null
  bool attention_bias = false;
  double attention_dropout = 0.0;
  bool mlp_bias = false;
  DType torch_dtype = DType::f32;
  // The sliding window of Mistral and Phi-3 (every layer; null: none), and of Qwen2 / Qwen3 when
  // use_sliding_window: on the layers that layer_types names sliding_attention, or when it is
  // empty, on layers from max_window_layers on (Qwen2Config's rule).
  std::optional<int64_t> sliding_window;
  bool use_sliding_window = false;
  int64_t max_window_layers = 28;
  std::vector<std::string> layer_types;  // Qwen2 / Qwen3's as config.json lists it, else empty
  // Phi-3's, kept to write config.json back: its RoPE reads the original context only for
  // longrope, and embd_pdrop is unused by transformers' Phi3Model.
  int64_t original_max_position_embeddings = 4096;
  double embd_pdrop = 0.0;
  // Gemma 2 / 3's: the attention scale query_pre_attn_scalar^-0.5; the soft caps c * tanh(x / c)
  // of the attention scores and of the logits (null: none); Gemma 3's local RoPE base (the
  // sliding layers' rope_theta, default RoPE; the global layers take rope_theta and
  // rope_scaling) and its pattern (every sliding_window_pattern-th layer is global) when
  // layer_types is not given. Gemma 2 slides the even layers (0, 2, ...) then.
  double query_pre_attn_scalar = 256.0;
  std::optional<double> attn_logit_softcapping;
  std::optional<double> final_logit_softcapping;
  double rope_local_base_freq = 10000.0;
  int64_t sliding_window_pattern = 6;

  int64_t effective_num_key_value_heads() const {
    return num_key_value_heads.value_or(num_attention_heads);
  }
  int64_t effective_head_dim() const {
    return head_dim.value_or(hidden_size / num_attention_heads);
  }
  RopeParameters rope() const { return {rope_theta, rope_scaling}; }
  bool gemma() const { return family == Family::gemma2 || family == Family::gemma3_text; }
  // Gemma 3's sliding layers rotate with their own base and default RoPE; every other layer
  // with rope().
  RopeParameters layer_rope(int64_t layer) const {
    if (family == Family::gemma3_text && sliding_layer(layer)) return {rope_local_base_freq, {}};
    return rope();
  }
  // The attention's score scale: query_pre_attn_scalar^-0.5 for Gemma, else head_dim^-0.5.
  double attention_scale() const {
    return 1.0 /
           std::sqrt(gemma() ? query_pre_attn_scalar : static_cast<double>(effective_head_dim()));
  }
  // The RMSNorms' weight offset: Gemma's scale by (1 + w), Llama's by w.
  double norm_weight_offset() const { return gemma() ? 1.0 : 0.0; }
  // Qwen3's per-head q_norm / k_norm, and Gemma 3's.
  bool qk_norm() const { return family == Family::qwen3 || family == Family::gemma3_text; }
  // q_proj, k_proj and v_proj have a bias: Llama's attention_bias, or always in Qwen2.
  bool qkv_bias() const { return attention_bias || family == Family::qwen2; }
  // Phi-3's fused qkv_proj and gate_up_proj.
  bool fused_projections() const { return family == Family::phi3; }
  // The sliding window of layer `layer` (null: full attention), as transformers applies it.
  std::optional<int64_t> attention_window(int64_t layer) const {
    switch (family) {
      case Family::llama:
        return std::nullopt;
      case Family::mistral:
      case Family::phi3:
        return sliding_window;
      case Family::gemma2:
      case Family::gemma3_text:
        return sliding_layer(layer) ? sliding_window : std::nullopt;
      case Family::qwen2:
      case Family::qwen3:
        break;
    }
    if (!use_sliding_window) return std::nullopt;
    const bool slides = layer_types.empty()
                            ? layer >= max_window_layers
                            : static_cast<size_t>(layer) < layer_types.size() &&
                                  layer_types[static_cast<size_t>(layer)] == "sliding_attention";
    return slides ? sliding_window : std::nullopt;
  }
  // Whether Gemma's layer `layer` is a sliding_attention one: layer_types', or else the pattern
  // Gemma2Config / Gemma3TextConfig fill it with.
  bool sliding_layer(int64_t layer) const {
    if (!layer_types.empty()) {
      return static_cast<size_t>(layer) < layer_types.size() &&
             layer_types[static_cast<size_t>(layer)] == "sliding_attention";
    }
    const int64_t pattern = family == Family::gemma2 ? 2 : sliding_window_pattern;
    return (layer + 1) % pattern != 0;
  }
  bool operator==(const LlamaConfig&) const = default;
};

using HfConfig = std::variant<GPT2Config, LlamaConfig>;

}  // namespace headroom
