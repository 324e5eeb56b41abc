// The preset table: GPT-2 sizes as the openai-community hub configs, Llama sizes as meta-llama's
// config.json files, and the tiny byte-level models the default training run uses.
#include "nn/model_presets.h"

#include <functional>
#include <utility>

#include "core/error.h"

namespace headroom {

namespace {

GPT2Config gpt2_sized(int64_t n_embd, int64_t n_layer, int64_t n_head) {
  GPT2Config config;  // GPT2Config's defaults are the 124M model
  config.n_embd = n_embd;
  config.n_layer = n_layer;
  config.n_head = n_head;
  return config;
}

// Small enough for a useful run in a couple of minutes on two CPU cores. Byte vocabulary, so no
// BOS / EOS ids (50256 would lie outside it); no dropout, which only slows such short runs.
GPT2Config gpt2_tiny() {
  GPT2Config config;
  config.vocab_size = 256;
  config.n_positions = 256;
  config.n_embd = 128;
  config.n_layer = 4;
  config.n_head = 4;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  config.bos_token_id = std::nullopt;
  config.eos_token_id = {};
  return config;
}

LlamaConfig llama_tiny() {
  LlamaConfig config;
  config.vocab_size = 256;
  config.hidden_size = 128;
  config.intermediate_size = 352;
  config.num_hidden_layers = 4;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 256;
  config.rms_norm_eps = 1e-5;
  config.bos_token_id = std::nullopt;
  config.eos_token_id = {};
  return config;
}

// meta-llama/Llama-2-{7b,13b,70b}-hf: context 4096, rms_norm_eps 1e-5, saved in float16.
LlamaConfig llama2_sized(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                         int64_t kv_heads) {
  LlamaConfig config;
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_hidden_layers = layers;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  config.max_position_embeddings = 4096;
  config.rms_norm_eps = 1e-5;
  config.torch_dtype = DType::f16;
  return config;
}

// meta-llama/Meta-Llama-3-8B.
LlamaConfig llama3_8b() {
  LlamaConfig config = llama2_sized(4096, 14336, 32, 32, 8);
  config.vocab_size = 128256;
  config.max_position_embeddings = 8192;
  config.rope_theta = 500000.0;
  config.bos_token_id = 128000;
  config.eos_token_id = {128001};
  config.torch_dtype = DType::bf16;
  return config;
}

// meta-llama/Llama-3.1-8B, Llama-3.2-1B / 3B, Llama-3.3-70B: Llama 3's vocabulary, a 128k
// context through llama3 RoPE scaling (factor 8; 32 for 3.2) of the 8k pretraining context.
LlamaConfig llama31_sized(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                          double factor, bool tied) {
  LlamaConfig config = llama3_8b();
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_hidden_layers = layers;
  config.num_attention_heads = heads;
  config.head_dim = hidden / heads;
  config.max_position_embeddings = 131072;
  config.rope_scaling = {.type = RopeScaling::Type::llama3,
                         .factor = factor,
                         .low_freq_factor = 1.0,
                         .high_freq_factor = 4.0,
                         .original_max_position_embeddings = 8192};
  config.eos_token_id = {128001, 128008, 128009};
  config.tie_word_embeddings = tied;
  return config;
}

// Qwen/Qwen2.5-{0.5B,1.5B,7B,14B,32B,72B}-Instruct: q / k / v biases, rope_theta 1e6, a 32k
// context, bf16; the two small ones tie their embeddings and have the 151,936-token vocabulary.
LlamaConfig qwen25_sized(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                         int64_t kv_heads, bool small) {
  LlamaConfig config;
  config.family = LlamaConfig::Family::qwen2;
  config.vocab_size = small ? 151936 : 152064;
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_hidden_layers = layers;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  config.max_position_embeddings = 32768;
  config.rope_theta = 1000000.0;
  config.rms_norm_eps = 1e-6;
  config.tie_word_embeddings = small;
  config.bos_token_id = 151643;
  config.eos_token_id = {151645};
  config.sliding_window = 32768;
  config.max_window_layers = layers;
  config.torch_dtype = DType::bf16;
  return config;
}

// Qwen/Qwen3-8B: head_dim 128, q_norm / k_norm, no biases, a 40k context.
LlamaConfig qwen3_8b() {
  LlamaConfig config = qwen25_sized(4096, 12288, 36, 32, 8, true);
  config.family = LlamaConfig::Family::qwen3;
  config.head_dim = 128;
  config.max_position_embeddings = 40960;
  config.tie_word_embeddings = false;
  config.sliding_window = std::nullopt;
  return config;
}

// mistralai/Mistral-7B-v0.3: Llama's block with GQA, rope_theta 1e6, a 32,768-token vocabulary
// and context; its sliding_window is null (v0.1's was 4096), so attention is full.
LlamaConfig mistral_7b() {
  LlamaConfig config;
  config.family = LlamaConfig::Family::mistral;
  config.vocab_size = 32768;
  config.hidden_size = 4096;
  config.intermediate_size = 14336;
  config.num_hidden_layers = 32;
  config.num_attention_heads = 32;
  config.num_key_value_heads = 8;
  config.max_position_embeddings = 32768;
  config.rope_theta = 1000000.0;
  config.rms_norm_eps = 1e-5;
  config.sliding_window = std::nullopt;
  config.torch_dtype = DType::bf16;
  return config;
}

// microsoft/Phi-3-mini-4k-instruct: fused qkv_proj / gate_up_proj, 32 heads without GQA
// (head_dim 96), a 4k context with a 2047-key sliding window, pad 32000.
LlamaConfig phi3_mini() {
  LlamaConfig config;
  config.family = LlamaConfig::Family::phi3;
  config.vocab_size = 32064;
  config.hidden_size = 3072;
  config.intermediate_size = 8192;
  config.num_hidden_layers = 32;
  config.num_attention_heads = 32;
  config.num_key_value_heads = 32;
  config.max_position_embeddings = 4096;
  config.original_max_position_embeddings = 4096;
  config.rms_norm_eps = 1e-5;
  config.bos_token_id = 1;
  config.eos_token_id = {32000};
  config.pad_token_id = 32000;
  config.sliding_window = 2047;
  config.torch_dtype = DType::bf16;
  return config;
}

// google/gemma-2-{2b,9b,27b}: Gemma2Config's block with its soft caps (attention 50, logits 30),
// a 4096-key window on the even layers, the 256,000-token vocabulary tied to the head, an 8k
// context; query_pre_attn_scalar 256, except 27B's 144 (hidden / heads).
LlamaConfig gemma2_sized(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                         int64_t kv_heads, int64_t head_dim, double query_pre_attn_scalar,
                         DType dtype) {
  LlamaConfig config;
  config.family = LlamaConfig::Family::gemma2;
  config.vocab_size = 256000;
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_hidden_layers = layers;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  config.head_dim = head_dim;
  config.hidden_act = "gelu_pytorch_tanh";
  config.max_position_embeddings = 8192;
  config.rms_norm_eps = 1e-6;
  config.pad_token_id = 0;
  config.bos_token_id = 2;
  config.eos_token_id = {1};
  config.tie_word_embeddings = true;
  config.query_pre_attn_scalar = query_pre_attn_scalar;
  config.attn_logit_softcapping = 50.0;
  config.final_logit_softcapping = 30.0;
  config.sliding_window = 4096;
  for (int64_t i = 0; i < layers; ++i) {
    config.layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  }
  config.torch_dtype = dtype;
  return config;
}

// google/gemma-3-{1b-pt,4b-pt,12b-pt}'s text model (Gemma3TextConfig; 4B and 12B's text_config):
// head_dim 256, q_norm / k_norm, five sliding layers to a global one, no soft caps, global RoPE
// theta 1e6 (linear x8 past 1B), local theta 1e4; 1B has a 262,144-token vocabulary, a 32k
// context and a 512-key window, the others 262,208 tokens, 128k and 1024 keys.
LlamaConfig gemma3_sized(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                         int64_t kv_heads, bool small) {
  LlamaConfig config =
      gemma2_sized(hidden, intermediate, layers, heads, kv_heads, 256, 256.0, DType::bf16);
  config.family = LlamaConfig::Family::gemma3_text;
  config.vocab_size = small ? 262144 : 262208;
  config.max_position_embeddings = small ? 32768 : 131072;
  config.attn_logit_softcapping.reset();
  config.final_logit_softcapping.reset();
  config.sliding_window = small ? 512 : 1024;
  config.rope_theta = 1000000.0;
  config.rope_local_base_freq = 10000.0;
  if (!small) {
    config.rope_scaling.type = RopeScaling::Type::linear;
    config.rope_scaling.factor = 8.0;
  }
  config.layer_types.clear();
  for (int64_t i = 0; i < layers; ++i) {
    config.layer_types.push_back((i + 1) % 6 != 0 ? "sliding_attention" : "full_attention");
  }
  return config;
}

const std::vector<std::pair<std::string, std::function<HfConfig()>>>& presets() {
  static const std::vector<std::pair<std::string, std::function<HfConfig()>>> table = {
      {"gpt2-tiny", [] { return HfConfig(gpt2_tiny()); }},
      {"gpt2", [] { return HfConfig(GPT2Config{}); }},
      {"gpt2-medium", [] { return HfConfig(gpt2_sized(1024, 24, 16)); }},
      {"gpt2-large", [] { return HfConfig(gpt2_sized(1280, 36, 20)); }},
      {"gpt2-xl", [] { return HfConfig(gpt2_sized(1600, 48, 25)); }},
      {"llama-tiny", [] { return HfConfig(llama_tiny()); }},
      {"llama-7b", [] { return HfConfig(llama2_sized(4096, 11008, 32, 32, 32)); }},
      {"llama-13b", [] { return HfConfig(llama2_sized(5120, 13824, 40, 40, 40)); }},
      {"llama-70b", [] { return HfConfig(llama2_sized(8192, 28672, 80, 64, 8)); }},
      {"llama-3-8b", [] { return HfConfig(llama3_8b()); }},
      {"llama-3.1-8b", [] { return HfConfig(llama31_sized(4096, 14336, 32, 32, 8.0, false)); }},
      {"llama-3.2-1b", [] { return HfConfig(llama31_sized(2048, 8192, 16, 32, 32.0, true)); }},
      {"llama-3.2-3b", [] { return HfConfig(llama31_sized(3072, 8192, 28, 24, 32.0, true)); }},
      {"llama-3.3-70b", [] { return HfConfig(llama31_sized(8192, 28672, 80, 64, 8.0, false)); }},
      {"qwen2.5-0.5b", [] { return HfConfig(qwen25_sized(896, 4864, 24, 14, 2, true)); }},
      {"qwen2.5-1.5b", [] { return HfConfig(qwen25_sized(1536, 8960, 28, 12, 2, true)); }},
      {"qwen2.5-7b", [] { return HfConfig(qwen25_sized(3584, 18944, 28, 28, 4, false)); }},
      {"qwen2.5-14b", [] { return HfConfig(qwen25_sized(5120, 13824, 48, 40, 8, false)); }},
      {"qwen2.5-32b", [] { return HfConfig(qwen25_sized(5120, 27648, 64, 40, 8, false)); }},
      {"qwen2.5-72b", [] { return HfConfig(qwen25_sized(8192, 29568, 80, 64, 8, false)); }},
      {"qwen3-8b", [] { return HfConfig(qwen3_8b()); }},
      {"mistral-7b", [] { return HfConfig(mistral_7b()); }},
      {"phi-3-mini", [] { return HfConfig(phi3_mini()); }},
      {"gemma-2-2b",
       [] { return HfConfig(gemma2_sized(2304, 9216, 26, 8, 4, 256, 256.0, DType::f32)); }},
      {"gemma-2-9b",
       [] { return HfConfig(gemma2_sized(3584, 14336, 42, 16, 8, 256, 256.0, DType::f32)); }},
      {"gemma-2-27b",
       [] { return HfConfig(gemma2_sized(4608, 36864, 46, 32, 16, 128, 144.0, DType::bf16)); }},
      {"gemma-3-1b", [] { return HfConfig(gemma3_sized(1152, 6912, 26, 4, 1, true)); }},
      {"gemma-3-4b", [] { return HfConfig(gemma3_sized(2560, 10240, 34, 8, 4, false)); }},
      {"gemma-3-12b", [] { return HfConfig(gemma3_sized(3840, 15360, 48, 16, 8, false)); }},
  };
  return table;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, make] : presets()) names.push_back(name);
  return names;
}

std::optional<HfConfig> find_model_preset(std::string_view name) {
  for (const auto& [preset, make] : presets()) {
    if (preset == name) return make();
  }
  return std::nullopt;
}

HfConfig model_preset(std::string_view name) {
  if (std::optional<HfConfig> config = find_model_preset(name)) return *config;
  std::string known;
  for (const std::string& preset : model_preset_names())
    known += (known.empty() ? "" : ", ") + preset;
  throw ValueError(str_cat("model: unknown preset '", name, "' (one of ", known, ")"));
}

int64_t context_length(const HfConfig& config) {
  if (const auto* gpt2 = std::get_if<GPT2Config>(&config)) return gpt2->n_positions;
  return std::get<LlamaConfig>(config).max_position_embeddings;
}

std::optional<int64_t> position_limit(const HfConfig& config) {
  if (const auto* gpt2 = std::get_if<GPT2Config>(&config)) return gpt2->n_positions;
  return std::nullopt;
}

void check_max_seq_length(const HfConfig& config, int64_t t) {
  const std::optional<int64_t> limit = position_limit(config);
  if (t < 1 || (limit && t > *limit)) {
    throw ValueError(str_cat("max_seq_length: ", t, " is outside [1, ",
                             limit ? std::to_string(*limit) : std::string("..."),
                             "] (the model's learned positions)"));
  }
}

int64_t vocab_size(const HfConfig& config) {
  return std::visit([](const auto& c) { return c.vocab_size; }, config);
}

ModelDims model_dims(const HfConfig& config) {
  if (const auto* gpt2 = std::get_if<GPT2Config>(&config)) {
    return {gpt2->n_layer, gpt2->n_embd,     gpt2->n_head,
            gpt2->n_head,  gpt2->head_dim(), gpt2->vocab_size};
  }
  const auto& llama = std::get<LlamaConfig>(config);
  return {llama.num_hidden_layers,    llama.hidden_size,
          llama.num_attention_heads,  llama.effective_num_key_value_heads(),
          llama.effective_head_dim(), llama.vocab_size};
}

}  // namespace headroom
