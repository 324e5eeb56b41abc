// HF config.json: defaults, real GPT-2 and TinyLlama files, round trips, and every rejection.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hf_config.h"
#include "core/json_file.h"
#include "io_test_helpers.h"

namespace headroom {
namespace {

using io_test::expect_error;
using io_test::TempDir;
using io_test::write_bytes;

// openai-community/gpt2's config.json as the hub serves it.
constexpr const char* kGPT2Json = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";

// TinyLlama/TinyLlama-1.1B-Chat-v1.0's config.json.
constexpr const char* kTinyLlamaJson = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
})";

GPT2Config parse_gpt2(const std::string& text) {
  return std::get<GPT2Config>(parse_hf_config(text, "config.json"));
}

LlamaConfig parse_llama(const std::string& text) {
  return std::get<LlamaConfig>(parse_hf_config(text, "config.json"));
}

// `base` with `patch` merged over it (a null in the patch deletes nothing: it sets null).
std::string patched(const char* base, const nlohmann::json& patch) {
  nlohmann::json config = nlohmann::json::parse(base);
  for (const auto& [key, value] : patch.items()) config[key] = value;
  return config.dump();
}

// GPT2Config().to_json_string() in transformers 4.57.6: every default, as transformers has it.
constexpr const char* kTransformersGPT2Defaults = R"({
  "activation_function": "gelu_new", "attn_pdrop": 0.1, "bos_token_id": 50256,
  "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_embd": 768, "n_head": 12,
  "n_inner": null, "n_layer": 12, "n_positions": 1024, "reorder_and_upcast_attn": false,
  "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": false, "scale_attn_weights": true,
  "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
  "summary_type": "cls_index", "summary_use_proj": true, "transformers_version": "4.57.6",
  "use_cache": true, "vocab_size": 50257
})";

// LlamaConfig().to_json_string() in transformers 4.57.6, which resolves head_dim and
// num_key_value_heads.
constexpr const char* kTransformersLlamaDefaults = R"({
  "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 2048, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 32, "pretraining_tp": 1, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 10000.0, "tie_word_embeddings": false, "transformers_version": "4.57.6",
  "use_cache": true, "vocab_size": 32000
})";

TEST(HfConfig, DefaultsAreTransformers) {
  // Fields a file leaves out take the defaults, and they are transformers' own.
  EXPECT_EQ(parse_gpt2(R"({"model_type": "gpt2"})"), GPT2Config{});
  EXPECT_EQ(parse_gpt2(kTransformersGPT2Defaults), GPT2Config{});
  EXPECT_EQ(GPT2Config{}.effective_n_inner(), 3072);
  EXPECT_EQ(GPT2Config{}.head_dim(), 64);
  EXPECT_TRUE(GPT2Config{}.tie_word_embeddings);  // PretrainedConfig's default
  EXPECT_EQ(GPT2Config{}.torch_dtype, DType::f32);

  EXPECT_EQ(parse_llama(R"({"model_type": "llama"})"), LlamaConfig{});
  LlamaConfig llama = parse_llama(kTransformersLlamaDefaults);
  EXPECT_EQ(llama.head_dim, 128);
  EXPECT_EQ(llama.num_key_value_heads, 32);
  EXPECT_EQ(LlamaConfig{}.effective_head_dim(), 128);
  EXPECT_EQ(LlamaConfig{}.effective_num_key_value_heads(), 32);
  llama.head_dim.reset();
  llama.num_key_value_heads.reset();
  EXPECT_EQ(llama, LlamaConfig{});
}

TEST(HfConfig, ReadsGPT2AndTinyLlamaFiles) {
  TempDir dir;
  write_bytes(dir.file("config.json"), kGPT2Json);
  // A directory means its config.json.
  const GPT2Config gpt2 = std::get<GPT2Config>(read_hf_config(dir.str()));
  EXPECT_EQ(gpt2, GPT2Config{});  // gpt2's file spells out the defaults

  write_bytes(dir.file("config.json"), kTinyLlamaJson);
  const LlamaConfig llama = std::get<LlamaConfig>(read_hf_config(dir.file("config.json")));
  EXPECT_EQ(llama.hidden_size, 2048);
  EXPECT_EQ(llama.intermediate_size, 5632);
  EXPECT_EQ(llama.num_hidden_layers, 22);
  EXPECT_EQ(llama.num_attention_heads, 32);
  EXPECT_EQ(llama.num_key_value_heads, 4);
  EXPECT_EQ(llama.effective_head_dim(), 64);
  EXPECT_EQ(llama.rms_norm_eps, 1e-5);
  EXPECT_EQ(llama.bos_token_id, 1);
  EXPECT_EQ(llama.eos_token_id, std::vector<int64_t>({2}));
  EXPECT_EQ(llama.torch_dtype, DType::bf16);

  expect_error<ValueError>([&] { read_hf_config(dir.file("missing.json")); },
                           {"missing.json", "No such file"});
}

TEST(HfConfig, ReadsListsNullsAndNewerSpellings) {
  const LlamaConfig llama = parse_llama(
      patched(kTinyLlamaJson, {{"eos_token_id", {128001, 128009}},
                               {"bos_token_id", nullptr},
                               {"num_key_value_heads", nullptr},
                               {"head_dim", 128},
                               {"rope_theta", 500000},  // an integer where a float is expected
                               {"rope_scaling", {{"rope_type", "default"}}},
                               {"dtype", "float16"}}));
  EXPECT_EQ(llama.eos_token_id, std::vector<int64_t>({128001, 128009}));
  EXPECT_FALSE(llama.bos_token_id.has_value());
  EXPECT_EQ(llama.effective_num_key_value_heads(), 32);
  EXPECT_EQ(llama.effective_head_dim(), 128);
  EXPECT_EQ(llama.rope_theta, 500000.0);
  EXPECT_EQ(llama.torch_dtype, DType::f16);

  // transformers 5 moves rope_theta into rope_parameters.
  const LlamaConfig v5 = parse_llama(patched(
      kTinyLlamaJson, {{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}}}));
  EXPECT_EQ(v5.rope_theta, 1e6);

  const GPT2Config gpt2 = parse_gpt2(patched(kGPT2Json, {{"n_inner", 1024}}));
  EXPECT_EQ(gpt2.effective_n_inner(), 1024);
}

TEST(HfConfig, ScaledRopeIsReadAndWrittenAsTransformersDoes) {
  using json = nlohmann::json;
  const json llama3 = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const LlamaConfig c = parse_llama(patched(kTinyLlamaJson, {{"rope_scaling", llama3}}));
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  // transformers 5's rope_parameters, rope_theta inside.
  json v5 = llama3;
  v5["rope_theta"] = 500000.0;
  const LlamaConfig c5 = parse_llama(patched(kTinyLlamaJson, {{"rope_parameters", v5}}));
  EXPECT_EQ(c5.rope_scaling, c.rope_scaling);
  EXPECT_EQ(c5.rope_theta, 500000.0);
  // Written back as rope_scaling, read back the same.
  const std::string text = to_json(HfConfig(c5));
  EXPECT_EQ(json::parse(text)["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(parse_llama(text).rope(), c5.rope());
  const LlamaConfig linear =
      parse_llama(patched(kTinyLlamaJson, {{"rope_scaling", {{"type", "linear"}, {"factor", 2}}}}));
  EXPECT_EQ(linear.rope_scaling.type, RopeScaling::Type::linear);
  EXPECT_EQ(linear.rope_scaling.factor, 2.0);
}

TEST(HfConfig, Qwen2IsLlamaWithQkvBiases) {
  const std::string dir = std::string(HEADROOM_FIXTURES_DIR) + "/models/qwen2_tiny";
  const LlamaConfig c = std::get<LlamaConfig>(read_hf_config(dir));
  EXPECT_EQ(c.family, LlamaConfig::Family::qwen2);
  EXPECT_TRUE(c.qkv_bias());
  EXPECT_FALSE(c.attention_bias);  // o_proj has none
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.effective_num_key_value_heads(), 2);
  // Written back as transformers' Qwen2Config, read back the same.
  const std::string text = to_json(HfConfig(c));
  const nlohmann::json written = nlohmann::json::parse(text);
  EXPECT_EQ(written["model_type"], "qwen2");
  EXPECT_EQ(written["architectures"], nlohmann::json({"Qwen2ForCausalLM"}));
  EXPECT_FALSE(written["use_sliding_window"].get<bool>());
  EXPECT_FALSE(written.contains("attention_bias"));
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(text, "x")), c);
  for (int64_t layer : {0, 1}) EXPECT_EQ(c.attention_window(layer), std::nullopt);
  // A sliding_attention layer with the window off has no window to apply (transformers fails to
  // build its mask): refused, naming the fields.
  nlohmann::json config = nlohmann::json::parse(text);
  config["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error<ValueError>([&] { parse_hf_config(config.dump(), "q.json"); },
                           {"q.json: field 'layer_types' lists sliding_attention",
                            "use_sliding_window false", "sliding_window null"});
  config["layer_types"] = {"full_attention", "chunked_attention"};
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "q.json"); },
                                    {"q.json: field 'layer_types' holds", "chunked_attention"});
  config["layer_types"] = {"full_attention"};
  expect_error<ValueError>([&] { parse_hf_config(config.dump(), "q.json"); },
                           {"q.json: field 'layer_types' lists 1 layers", "num_hidden_layers 2"});
}

// Qwen2Config's rule: with use_sliding_window the layers from max_window_layers on slide, or
// those layer_types names; without it none, whatever sliding_window says.
TEST(HfConfig, Qwen2SlidingWindowLayers) {
  const std::string dir = std::string(HEADROOM_FIXTURES_DIR) + "/models/qwen2_window_tiny";
  const LlamaConfig c = std::get<LlamaConfig>(read_hf_config(dir));
  EXPECT_TRUE(c.use_sliding_window);
  EXPECT_EQ(c.attention_window(0), std::nullopt);
  EXPECT_EQ(c.attention_window(1), 5);
  const std::string text = to_json(HfConfig(c));
  const nlohmann::json written = nlohmann::json::parse(text);
  EXPECT_TRUE(written["use_sliding_window"].get<bool>());
  EXPECT_EQ(written["layer_types"], nlohmann::json({"full_attention", "sliding_attention"}));
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(text, "x")), c);

  nlohmann::json derived = written;
  derived.erase("layer_types");
  derived["num_hidden_layers"] = 4;
  derived["max_window_layers"] = 2;
  const LlamaConfig d = std::get<LlamaConfig>(parse_hf_config(derived.dump(), "x"));
  EXPECT_EQ(d.attention_window(1), std::nullopt);
  EXPECT_EQ(d.attention_window(2), 5);
  derived["use_sliding_window"] = false;
  const LlamaConfig off = std::get<LlamaConfig>(parse_hf_config(derived.dump(), "x"));
  EXPECT_EQ(off.attention_window(3), std::nullopt);
  EXPECT_EQ(off.sliding_window, 5);  // kept to write back
}

TEST(HfConfig, MistralSlidesEveryLayer) {
  const std::string dir = std::string(HEADROOM_FIXTURES_DIR) + "/models/mistral_tiny";
  const LlamaConfig c = std::get<LlamaConfig>(read_hf_config(dir));
  EXPECT_EQ(c.family, LlamaConfig::Family::mistral);
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_EQ(c.attention_window(0), 7);
  EXPECT_EQ(c.attention_window(1), 7);
  const std::string text = to_json(HfConfig(c));
  const nlohmann::json written = nlohmann::json::parse(text);
  EXPECT_EQ(written["model_type"], "mistral");
  EXPECT_EQ(written["architectures"], nlohmann::json({"MistralForCausalLM"}));
  EXPECT_EQ(written["sliding_window"], 7);
  EXPECT_FALSE(written.contains("attention_bias"));
  EXPECT_FALSE(written.contains("use_sliding_window"));
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(text, "x")), c);
  // MistralConfig's defaults: a 4096-key window unless the file says null.
  const LlamaConfig defaults =
      std::get<LlamaConfig>(parse_hf_config(R"({"model_type": "mistral"})", "x"));
  EXPECT_EQ(defaults.sliding_window, 4096);
  EXPECT_EQ(defaults.effective_num_key_value_heads(), 8);
  EXPECT_EQ(defaults.intermediate_size, 14336);
  nlohmann::json config = written;
  config["sliding_window"] = nullptr;
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(config.dump(), "x")).attention_window(0),
            std::nullopt);
  // Layer types Mistral would not apply (a Ministral model's) are refused.
  config["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "m.json"); },
                                    {"m.json: field 'layer_types' holds", "sliding_attention"});
  config["sliding_window"] = 0;
  config.erase("layer_types");
  expect_error<ValueError>([&] { parse_hf_config(config.dump(), "m.json"); },
                           {"m.json", "sliding_window"});
}

TEST(HfConfig, Phi3HasFusedProjections) {
  const std::string dir = std::string(HEADROOM_FIXTURES_DIR) + "/models/phi3_tiny";
  const LlamaConfig c = std::get<LlamaConfig>(read_hf_config(dir));
  EXPECT_EQ(c.family, LlamaConfig::Family::phi3);
  EXPECT_TRUE(c.fused_projections());
  EXPECT_EQ(c.attention_window(1), 11);
  EXPECT_EQ(c.original_max_position_embeddings, 256);
  const std::string text = to_json(HfConfig(c));
  const nlohmann::json written = nlohmann::json::parse(text);
  EXPECT_EQ(written["model_type"], "phi3");
  EXPECT_EQ(written["architectures"], nlohmann::json({"Phi3ForCausalLM"}));
  EXPECT_EQ(written["resid_pdrop"], 0.0);
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(text, "x")), c);
  const LlamaConfig defaults =
      std::get<LlamaConfig>(parse_hf_config(R"({"model_type": "phi3"})", "x"));
  EXPECT_EQ(defaults.vocab_size, 32064);
  EXPECT_EQ(defaults.pad_token_id, 32000);
  EXPECT_EQ(defaults.sliding_window, std::nullopt);
  // What headroom does not implement is refused, naming the file, field and value.
  nlohmann::json config = written;
  config["resid_pdrop"] = 0.1;
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "p.json"); },
                                    {"p.json: field 'resid_pdrop' is 0.1"});
  config["resid_pdrop"] = 0.0;
  config["partial_rotary_factor"] = 0.5;
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "p.json"); },
                                    {"p.json: field 'partial_rotary_factor' is 0.5"});
  config.erase("partial_rotary_factor");
  config["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.75}};
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "p.json"); },
                                    {"p.json: rope_parameters: partial_rotary_factor 0.75"});
  // longrope needs one factor per frequency (head_dim 8 / 2 here).
  config["rope_parameters"] = nullptr;
  config["rope_scaling"] = {
      {"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0, 2.0, 3.0, 4.0}}};
  expect_error<ValueError>([&] { parse_hf_config(config.dump(), "p.json"); },
                           {"p.json: rope_scaling: short_factor has 1 factors", "= 4"});
  config["rope_scaling"] = {{"type", "dynamic_longrope"}};
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "p.json"); },
                                    {"p.json: rope_scaling: rope_type 'dynamic_longrope'"});
}

// Phi-3's longrope, from its transformers 4.x fields with the legacy name "su" (L0 and the
// attention factor follow from the top-level context lengths), written back as 4.x validates it
// and read back the same; yarn written with its attention factor computed.
TEST(HfConfig, LongropeAndYarnAreReadAndWrittenBack) {
  nlohmann::json phi3 = {{"model_type", "phi3"},
                         {"hidden_size", 32},
                         {"num_attention_heads", 4},
                         {"max_position_embeddings", 256},
                         {"original_max_position_embeddings", 64},
                         {"rope_scaling",
                          {{"type", "su"},
                           {"short_factor", {1.0, 1.05, 1.1, 1.2}},
                           {"long_factor", {1.0, 2.0, 4.5, 9.0}}}}};
  const LlamaConfig c = std::get<LlamaConfig>(parse_hf_config(phi3.dump(), "p.json"));
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::longrope);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(64.0)));
  EXPECT_EQ(c.rope_scaling.factor_count, 4);
  EXPECT_EQ(c.rope_scaling.long_factor[2], 4.5f);
  const nlohmann::json written = nlohmann::json::parse(to_json(HfConfig(c)));
  EXPECT_EQ(written["rope_scaling"].size(), 3u) << written["rope_scaling"];
  EXPECT_EQ(written["rope_scaling"]["type"], "longrope");
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(written.dump(), "x")), c);

  nlohmann::json llama = nlohmann::json::parse(kTinyLlamaJson);
  llama["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0},         {"original_max_position_embeddings", 16},
      {"mscale", 1.0},       {"mscale_all_dim", 0.5}, {"truncate", false}};
  const LlamaConfig y = std::get<LlamaConfig>(parse_hf_config(llama.dump(), "l.json"));
  EXPECT_EQ(y.rope_scaling.type, RopeScaling::Type::yarn);
  EXPECT_FALSE(y.rope_scaling.truncate);
  EXPECT_DOUBLE_EQ(y.rope_scaling.attention_factor,
                   (0.1 * std::log(4.0) + 1) / (0.1 * 0.5 * std::log(4.0) + 1));
  const std::string text = to_json(HfConfig(y));
  EXPECT_EQ(nlohmann::json::parse(text)["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(text, "x")), y);
  llama["rope_scaling"]["beta_fast"] = "fast";
  expect_error<ValueError>([&] { parse_hf_config(llama.dump(), "l.json"); },
                           {"l.json: rope_scaling", "beta_fast"});
}

TEST(HfConfig, Qwen3HasPerHeadQkNorms) {
  const std::string dir = std::string(HEADROOM_FIXTURES_DIR) + "/models/qwen3_tiny";
  const LlamaConfig c = std::get<LlamaConfig>(read_hf_config(dir));
  EXPECT_EQ(c.family, LlamaConfig::Family::qwen3);
  EXPECT_TRUE(c.qk_norm());
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_EQ(c.effective_head_dim(), 16);  // apart from hidden / heads (8)
  const std::string text = to_json(HfConfig(c));
  const nlohmann::json written = nlohmann::json::parse(text);
  EXPECT_EQ(written["model_type"], "qwen3");
  EXPECT_EQ(written["architectures"], nlohmann::json({"Qwen3ForCausalLM"}));
  EXPECT_EQ(written["head_dim"], 16);
  EXPECT_FALSE(written["attention_bias"].get<bool>());
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(text, "x")), c);
}

TEST(HfConfig, Gemma2HasSoftCapsAndAlternatingWindows) {
  const std::string dir = std::string(HEADROOM_FIXTURES_DIR) + "/models/gemma2_tiny";
  const LlamaConfig c = std::get<LlamaConfig>(read_hf_config(dir));
  EXPECT_EQ(c.family, LlamaConfig::Family::gemma2);
  EXPECT_EQ(c.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(c.attn_logit_softcapping, 2.0);
  EXPECT_EQ(c.final_logit_softcapping, 3.0);
  EXPECT_EQ(c.query_pre_attn_scalar, 24.0);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 1.0 / std::sqrt(24.0));
  EXPECT_EQ(c.attention_window(0), 7);
  EXPECT_EQ(c.attention_window(1), std::nullopt);
  EXPECT_EQ(c.norm_weight_offset(), 1.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qk_norm());
  const std::string text = to_json(HfConfig(c));
  const nlohmann::json written = nlohmann::json::parse(text);
  EXPECT_EQ(written["model_type"], "gemma2");
  EXPECT_EQ(written["architectures"], nlohmann::json({"Gemma2ForCausalLM"}));
  EXPECT_EQ(written["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_FALSE(written.contains("hidden_act"));
  EXPECT_EQ(written["final_logit_softcapping"], 3.0);
  EXPECT_TRUE(written["query_pre_attn_scalar"].is_number_integer());  // transformers 5 wants an int
  EXPECT_EQ(written["layer_types"], nlohmann::json({"sliding_attention", "full_attention"}));
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(text, "x")), c);
  // Gemma2Config's defaults: both caps, a 4096-key window on layers 0, 2, ... .
  const LlamaConfig defaults =
      std::get<LlamaConfig>(parse_hf_config(R"({"model_type": "gemma2"})", "x"));
  EXPECT_EQ(defaults.attn_logit_softcapping, 50.0);
  EXPECT_EQ(defaults.final_logit_softcapping, 30.0);
  EXPECT_EQ(defaults.attention_window(24), 4096);
  EXPECT_EQ(defaults.attention_window(25), std::nullopt);
  EXPECT_EQ(defaults.effective_head_dim(), 256);
  // What headroom does not implement is refused, naming the file, field and value.
  nlohmann::json config = written;
  config["use_bidirectional_attention"] = true;
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "g.json"); },
                                    {"g.json: field 'use_bidirectional_attention' is true"});
  config["use_bidirectional_attention"] = nullptr;
  config["hidden_activation"] = "gelu";
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "g.json"); },
                                    {"g.json: field 'hidden_activation' is 'gelu'"});
  config["hidden_activation"] = "gelu_pytorch_tanh";
  config["attn_logit_softcapping"] = -1.0;
  expect_error<ValueError>([&] { parse_hf_config(config.dump(), "g.json"); },
                           {"g.json: field 'attn_logit_softcapping' is -1"});
  config["attn_logit_softcapping"] = nullptr;
  config["sliding_window"] = nullptr;
  expect_error<ValueError>([&] { parse_hf_config(config.dump(), "g.json"); },
                           {"g.json: layer 0 is a sliding_attention layer", "'sliding_window'"});
}

TEST(HfConfig, Gemma3TextHasTwoRopeBasesAndQkNorms) {
  const std::string dir = std::string(HEADROOM_FIXTURES_DIR) + "/models/gemma3_tiny";
  const LlamaConfig c = std::get<LlamaConfig>(read_hf_config(dir));
  EXPECT_EQ(c.family, LlamaConfig::Family::gemma3_text);
  EXPECT_TRUE(c.qk_norm());
  EXPECT_EQ(c.attn_logit_softcapping, std::nullopt);
  EXPECT_EQ(c.final_logit_softcapping, std::nullopt);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::linear);
  EXPECT_EQ(c.rope_scaling.factor, 2.0);
  EXPECT_EQ(c.rope_local_base_freq, 1e4);
  EXPECT_EQ(c.layer_rope(0), (RopeParameters{1e4, {}}));
  EXPECT_EQ(c.layer_rope(1), c.rope());
  EXPECT_EQ(c.attention_window(0), 5);
  EXPECT_EQ(c.attention_window(1), std::nullopt);
  EXPECT_EQ(c.attention_window(2), 5);
  const std::string text = to_json(HfConfig(c));
  const nlohmann::json written = nlohmann::json::parse(text);
  EXPECT_EQ(written["model_type"], "gemma3_text");
  EXPECT_EQ(written["architectures"], nlohmann::json({"Gemma3ForCausalLM"}));
  EXPECT_EQ(written["rope_parameters"]["sliding_attention"]["rope_theta"], 1e4);
  EXPECT_EQ(written["rope_parameters"]["full_attention"]["rope_type"], "linear");
  EXPECT_EQ(written["rope_local_base_freq"], 1e4);
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(text, "x")), c);
  // transformers 4's spelling: rope_theta, rope_scaling and rope_local_base_freq at the top, the
  // pattern instead of layer_types.
  nlohmann::json old = written;
  old.erase("rope_parameters");
  old.erase("layer_types");
  old["rope_local_base_freq"] = 5e3;
  old["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  old["sliding_window_pattern"] = 3;
  const LlamaConfig t4 = std::get<LlamaConfig>(parse_hf_config(old.dump(), "x"));
  EXPECT_EQ(t4.rope_local_base_freq, 5e3);
  EXPECT_EQ(t4.rope_scaling.factor, 8.0);
  EXPECT_EQ(t4.attention_window(1), 5);
  EXPECT_EQ(t4.attention_window(2), std::nullopt);
  // Gemma3TextConfig's defaults: five sliding layers to a global one, theta 1e6 and 1e4.
  const LlamaConfig defaults =
      std::get<LlamaConfig>(parse_hf_config(R"({"model_type": "gemma3_text"})", "x"));
  EXPECT_EQ(defaults.attention_window(4), 4096);
  EXPECT_EQ(defaults.attention_window(5), std::nullopt);
  EXPECT_EQ(defaults.rope_theta, 1e6);
  EXPECT_EQ(defaults.vocab_size, 262208);
  // A scaled RoPE on the sliding layers, another layer type and the multimodal config are
  // refused, naming the file and the field.
  nlohmann::json config = written;
  config["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  config["rope_parameters"]["sliding_attention"]["factor"] = 2.0;
  expect_error<NotImplementedError>(
      [&] { parse_hf_config(config.dump(), "g.json"); },
      {"g.json: rope_parameters.sliding_attention", "rope_type default"});
  config = written;
  config["rope_parameters"]["chunked_attention"] = {{"rope_type", "default"}};
  expect_error<NotImplementedError>([&] { parse_hf_config(config.dump(), "g.json"); },
                                    {"g.json: rope_parameters: key 'chunked_attention'"});
  expect_error<NotImplementedError>(
      [] { parse_hf_config(R"({"model_type": "gemma3", "text_config": {}})", "g.json"); },
      {"g.json: field 'model_type' is 'gemma3'", "'gemma3_text'"});
}

TEST(HfConfig, RoundTrips) {
  GPT2Config gpt2;
  gpt2.n_embd = 64;
  gpt2.n_head = 4;
  gpt2.n_layer = 2;
  gpt2.n_inner = 200;
  gpt2.activation_function = "gelu_pytorch_tanh";
  gpt2.layer_norm_epsilon = 1e-6;
  gpt2.pad_token_id = 0;
  gpt2.torch_dtype = DType::bf16;
  EXPECT_EQ(std::get<GPT2Config>(parse_hf_config(to_json(gpt2), "x")), gpt2);
  EXPECT_EQ(std::get<GPT2Config>(parse_hf_config(to_json(GPT2Config{}), "x")), GPT2Config{});

  LlamaConfig llama = parse_llama(kTinyLlamaJson);
  llama.eos_token_id = {5, 6};
  llama.head_dim = 32;
  llama.attention_dropout = 0.25;
  TempDir dir;
  write_hf_config(dir.str(), llama);  // a directory gets config.json
  EXPECT_EQ(std::get<LlamaConfig>(read_hf_config(dir.file("config.json"))), llama);
  EXPECT_EQ(std::get<LlamaConfig>(parse_hf_config(to_json(LlamaConfig{}), "x")), LlamaConfig{});

  // What from_pretrained reads: model_type, architectures, torch_dtype, every field, sorted.
  const std::string text = to_json(GPT2Config{});
  const nlohmann::json written = nlohmann::json::parse(text);
  EXPECT_EQ(written["model_type"], "gpt2");
  EXPECT_EQ(written["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
  EXPECT_EQ(written["torch_dtype"], "float32");
  EXPECT_TRUE(written["n_inner"].is_null());
  EXPECT_EQ(written["eos_token_id"], 50256);
  EXPECT_TRUE(text.starts_with("{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\""))
      << text;
  EXPECT_EQ(text.back(), '\n');
  const nlohmann::json llama_written = nlohmann::json::parse(to_json(LlamaConfig{}));
  EXPECT_EQ(llama_written["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_TRUE(llama_written["rope_scaling"].is_null());
  EXPECT_FALSE(llama_written.contains("head_dim"));
}

TEST(HfConfig, RejectsModelTypesAndBadJson) {
  expect_error<ValueError>([] { parse_hf_config(R"({"model_type": "gemma"})", "cfg.json"); },
                           {"cfg.json", "field 'model_type' is 'gemma'",
                            "'gpt2', 'llama', 'qwen2', 'qwen3', 'mistral', 'phi3', 'gemma2' and "
                            "'gemma3_text'"});
  expect_error<ValueError>([] { parse_hf_config(R"({"n_embd": 768})", "cfg.json"); },
                           {"cfg.json", "field 'model_type' is missing"});
  expect_error<ValueError>([] { parse_hf_config(R"({"model_type": 2})", "cfg.json"); },
                           {"cfg.json", "field 'model_type' is number 2; expected a string"});
  expect_error<ValueError>([] { parse_hf_config(R"({"model_type": "gpt2",})", "cfg.json"); },
                           {"cfg.json", "invalid JSON"});
  expect_error<ValueError>([] { parse_hf_config("[]", "cfg.json"); },
                           {"cfg.json", "config is array [], not an object"});
}

// Note [Bounded JSON]: nesting far past the limit is refused before anything recurses over it
// (it used to overflow the stack), the limit itself is accepted, and a key given twice is refused
// with the key shortened.
TEST(HfConfig, RefusesDeepNestingAndDuplicateKeysInAnyJson) {
  const int64_t deep = 100000;
  const std::string arrays = std::string(deep, '[') + std::string(deep, ']');
  expect_error<ValueError>(
      [&] { parse_hf_config(R"({"model_type": "gpt2", "n_embd": )" + arrays + "}", "cfg.json"); },
      {"cfg.json: invalid JSON: nested deeper than 512 levels"});
  std::string objects;
  for (int64_t i = 0; i < deep; ++i) objects += R"({"a":)";
  objects += "1" + std::string(deep, '}');
  expect_error<ValueError>([&] { parse_json(objects, "header"); },
                           {"header: invalid JSON: nested deeper than 512 levels"});
  const std::string at_limit = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(parse_json(at_limit, "x").is_array());
  expect_error<ValueError>([&] { parse_json("[" + at_limit + "]", "x"); }, {"deeper than 512"});

  expect_error<ValueError>(
      [] { parse_hf_config(R"({"model_type": "gpt2", "model_type": "llama"})", "cfg.json"); },
      {"cfg.json: invalid JSON: key \"model_type\" appears twice in one object"});
  // Equal keys in different objects are fine; a 1 MB key is not echoed whole.
  EXPECT_EQ(parse_ordered_json(R"({"a": {"k": 1}, "b": {"k": 2}})", "x")["b"]["k"], 2);
  const std::string long_key(1 << 20, 'k');
  try {
    parse_json("{\"" + long_key + "\": 1, \"" + long_key + "\": 2}", "x");
    ADD_FAILURE() << "a duplicate key was accepted";
  } catch (const ValueError& e) {
    EXPECT_LT(std::string(e.what()).size(), 120u) << e.what();
  }
}

TEST(HfConfig, RejectsWrongTypes) {
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"n_embd", "768"}}));
      },
      {"config.json",
       "field 'n_embd' is string \"768\"; expected an "
       "integer"});
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"n_layer", 12.5}}));
      },
      {"field 'n_layer' is number 12.5; expected an integer"});
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"vocab_size", nullptr}}));
      },
      {"field 'vocab_size' is null; expected an integer"});
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"attn_pdrop", "0.1"}}));
      },
      {"field 'attn_pdrop' is string \"0.1\"; expected a number"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"tie_word_embeddings", 0}}));
      },
      {"field 'tie_word_embeddings' is number 0; expected true or false"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"eos_token_id", {2, "x"}}}));
      },
      {"field 'eos_token_id' is string \"x\"; expected an integer"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"torch_dtype", "float64"}}));
      },
      {"field 'torch_dtype' is 'float64'; headroom stores weights in "
       "float32, float16, bfloat16, float8_e4m3fn, float8_e5m2"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"torch_dtype", "int64"}}));
      },
      {"field 'torch_dtype' is 'int64'; headroom stores"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"rope_scaling", 2.0}}));
      },
      {"field 'rope_scaling' is number 2.0; expected null or an object"});
}

TEST(HfConfig, RejectsBadValues) {
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"n_head", 0}}));
      },
      {"config.json", "field 'n_head' is 0; it must be positive"});
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"n_inner", -1}}));
      },
      {"field 'n_inner' is -1; it must be positive"});
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"n_embd", 770}}));
      },
      {"config.json", "field 'n_embd' (770) is not divisible by field 'n_head' (12)"});
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"resid_pdrop", 1.5}}));
      },
      {"field 'resid_pdrop' is 1.5", "[0, 1]"});
  // Attention dropout of 1 failed inside the attention op, naming no file (issue 39, item 10).
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"attn_pdrop", 1.0}}));
      },
      {"config.json", "field 'attn_pdrop' is 1", "[0, 1)"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"attention_dropout", 1.0}}));
      },
      {"config.json", "field 'attention_dropout' is 1", "[0, 1)"});
  // An odd head dimension was refused by the model, naming no file.
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"head_dim", 7}}));
      },
      {"config.json", "the head dimension is 7 (field 'head_dim')", "even"});
  expect_error<ValueError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"layer_norm_epsilon", 0}}));
      },
      {"field 'layer_norm_epsilon' is 0; it must be positive"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"num_key_value_heads", 5}}));
      },
      {"config.json",
       "field 'num_attention_heads' (32) is not divisible by field 'num_key_value_heads' (5)"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"hidden_size", 2050}}));
      },
      {"field 'hidden_size' (2050) is not divisible by field 'num_attention_heads' (32)"});
  // An explicit head_dim lifts that requirement, as in LlamaConfig.
  EXPECT_EQ(parse_llama(patched(kTinyLlamaJson, {{"hidden_size", 2050}, {"head_dim", 64}}))
                .effective_head_dim(),
            64);
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"vocab_size", -5}}));
      },
      {"field 'vocab_size' is -5; it must be positive"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"rope_theta", 0}}));
      },
      {"field 'rope_theta' is 0; it must be positive"});
}

TEST(HfConfig, RejectsWhatIsNotImplemented) {
  expect_error<NotImplementedError>(
      [] {
        parse_gpt2(patched(kGPT2Json, {{"activation_function", "relu"}}));
      },
      {"config.json", "field 'activation_function' is 'relu'", "gelu_new, gelu_pytorch_tanh"});
  expect_error<NotImplementedError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"hidden_act", "gelu"}}));
      },
      {"config.json", "field 'hidden_act' is 'gelu'", "silu"});
  // RoPE: a type or key headroom does not compute is refused, a llama3 without its fields too.
  expect_error<NotImplementedError>(
      [] {
        parse_llama(patched(kTinyLlamaJson,
                            {{"rope_scaling", {{"rope_type", "ntk_by_parts"}, {"factor", 4.0}}}}));
      },
      {"config.json: rope_scaling: rope_type 'ntk_by_parts' is not implemented"});
  expect_error<NotImplementedError>(
      [] {
        parse_llama(
            patched(kTinyLlamaJson,
                    {{"rope_scaling",
                      {{"rope_type", "yarn"}, {"factor", 4.0}, {"low_freq_factor", 1.0}}}}));
      },
      {"config.json: rope_scaling: key 'low_freq_factor' of rope_type 'yarn'"});
  expect_error<NotImplementedError>(
      [] {
        parse_llama(
            patched(kTinyLlamaJson,
                    {{"rope_scaling",
                      {{"rope_type", "linear"}, {"factor", 2.0}, {"attention_factor", 1.5}}}}));
      },
      {"config.json: rope_scaling: key 'attention_factor' of rope_type 'linear'"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson,
                            {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}));
      },
      {"config.json: rope_scaling: rope_type 'llama3' needs 'low_freq_factor'"});
  expect_error<ValueError>(
      [] {
        parse_llama(patched(kTinyLlamaJson, {{"rope_scaling", {{"type", "linear"}}}}));
      },
      {"rope_type 'linear' needs 'factor'"});
}

}  // namespace
}  // namespace headroom
