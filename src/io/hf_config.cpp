// Reading, validating and writing HF config.json for GPT-2 and the Llama-shaped families (Llama,
// Qwen2, Qwen3, Mistral, Phi-3, Gemma 2, Gemma 3's text model).
#include "io/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_file.h"

namespace headroom {
namespace {

using nlohmann::json;

constexpr const char* kConfigName = "config.json";
constexpr const char* kReads =
    "headroom reads 'gpt2', 'llama', 'qwen2', 'qwen3', 'mistral', 'phi3', 'gemma2' and "
    "'gemma3_text' configs";

std::string config_path(const std::string& path) {
  return std::filesystem::is_directory(path) ? (std::filesystem::path(path) / kConfigName).string()
                                             : path;
}

// Reads the fields of one config object; a field that is absent keeps the default already in
// `out`. Errors name the source, the field, the value found and what was expected.
class FieldReader {
 public:
  FieldReader(const json& config, const std::string& source) : config_(config), source_(source) {}

  const std::string& source() const { return source_; }
  const json* find(const char* field) const {
    const auto it = config_.find(field);
    return it == config_.end() ? nullptr : &*it;
  }

  void read(const char* field, int64_t& out) const {
    if (const json* v = find(field)) out = to_int(field, *v);
  }
  void read(const char* field, std::optional<int64_t>& out) const {
    if (const json* v = find(field)) {
      out = v->is_null() ? std::nullopt : std::optional<int64_t>(to_int(field, *v));
    }
  }
  // One id, a list of ids, or null (empty).
  void read(const char* field, std::vector<int64_t>& out) const {
    const json* v = find(field);
    if (v == nullptr) return;
    out.clear();
    if (v->is_array()) {
      for (const json& id : *v) out.push_back(to_int(field, id));
    } else if (!v->is_null()) {
      out.push_back(to_int(field, *v));
    }
  }
  void read(const char* field, double& out) const {
    const json* v = find(field);
    if (v == nullptr) return;
    if (!v->is_number()) fail_type(field, *v, "a number");
    out = v->get<double>();
  }
  void read(const char* field, std::optional<double>& out) const {
    const json* v = find(field);
    if (v == nullptr) return;
    if (v->is_null()) {
      out.reset();
      return;
    }
    if (!v->is_number()) fail_type(field, *v, "a number or null");
    out = v->get<double>();
  }
  void read(const char* field, bool& out) const {
    const json* v = find(field);
    if (v == nullptr) return;
    if (!v->is_boolean()) fail_type(field, *v, "true or false");
    out = v->get<bool>();
  }
  void read(const char* field, std::string& out) const {
    const json* v = find(field);
    if (v == nullptr) return;
    if (!v->is_string()) fail_type(field, *v, "a string");
    out = v->get<std::string>();
  }
  // A PyTorch dtype name ("float32", "bfloat16"); null keeps the default.
  void read(const char* field, DType& out) const {
    const json* v = find(field);
    if (v == nullptr || v->is_null()) return;
    if (!v->is_string()) fail_type(field, *v, "a dtype name");
    const std::string& name = v->get_ref<const std::string&>();
    DType dtype = DType::f32;
    bool known = true;
    try {
      dtype = dtype_from_name(name);
    } catch (const ValueError&) {
      known = false;
    }
    if (!known || !is_floating(dtype)) {
      std::string floating;
      for (int i = 0; i < kNumDTypes; ++i) {
        const DTypeTraits& t = dtype_traits(static_cast<DType>(i));
        if (t.is_floating) floating += str_cat(floating.empty() ? "" : ", ", t.torch_name);
      }
      throw ValueError(str_cat(source_, ": field '", field, "' is '", name,
                               "'; headroom stores weights in ", floating));
    }
    out = dtype;
  }

  [[noreturn]] void fail_type(const char* field, const json& value, const char* expected) const {
    throw ValueError(str_cat(source_, ": field '", field, "' is ", describe_json(value),
                             "; expected ", expected));
  }

 private:
  int64_t to_int(const char* field, const json& v) const {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() &&
         v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      fail_type(field, v, "an integer");
    }
    return v.get<int64_t>();
  }

  const json& config_;
  const std::string& source_;
};

// Written as !(value > 0) so that a NaN fails too.
template <typename T>
void require_positive(const std::string& source, const char* field, T value) {
  if (!(value > 0)) {
    throw ValueError(str_cat(source, ": field '", field, "' is ", value, "; it must be positive"));
  }
}

void require_non_negative(const std::string& source, const char* field, double value) {
  if (!(value >= 0)) {
    throw ValueError(
        str_cat(source, ": field '", field, "' is ", value, "; it must not be negative"));
  }
}

void require_probability(const std::string& source, const char* field, double value) {
  if (!(value >= 0 && value <= 1)) {
    throw ValueError(str_cat(source, ": field '", field, "' is ", value,
                             "; a dropout probability lies in [0, 1]"));
  }
}

// Attention dropout of 1 would drop every attention weight (SDPA divides by 1 - p): the layer's
// output would be all zeros, and the attention op refuses it.
void require_attention_dropout(const std::string& source, const char* field, double value) {
  if (!(value >= 0 && value < 1)) {
    throw ValueError(str_cat(source, ": field '", field, "' is ", value,
                             "; an attention dropout probability lies in [0, 1)"));
  }
}

void require_divisible(const std::string& source, const char* field, int64_t value,
                       const char* by_field, int64_t by) {
  if (value % by != 0) {
    throw ValueError(str_cat(source, ": field '", field, "' (", value,
                             ") is not divisible by field '", by_field, "' (", by, ")"));
  }
}

void require_implemented(const std::string& source, const char* field, const std::string& value,
                         std::initializer_list<std::string_view> implemented) {
  std::string list;
  for (std::string_view name : implemented) {
    if (value == name) return;
    list += str_cat(list.empty() ? "" : ", ", name);
  }
  throw NotImplementedError(
      str_cat(source, ": field '", field, "' is '", value, "'; headroom implements ", list));
}

// Note [One field list per config]: reading and writing walk the same list of config.json
// fields, so a field added to a config struct is named once, here, and round-trips. `Config` is
// the struct or the const struct.
template <typename Config, typename Visit>
void gpt2_fields(Config& c, Visit&& visit) {
  visit("vocab_size", c.vocab_size);
  visit("n_positions", c.n_positions);
  visit("n_embd", c.n_embd);
  visit("n_layer", c.n_layer);
  visit("n_head", c.n_head);
  visit("n_inner", c.n_inner);
  visit("activation_function", c.activation_function);
  visit("resid_pdrop", c.resid_pdrop);
  visit("embd_pdrop", c.embd_pdrop);
  visit("attn_pdrop", c.attn_pdrop);
  visit("layer_norm_epsilon", c.layer_norm_epsilon);
  visit("initializer_range", c.initializer_range);
  visit("scale_attn_weights", c.scale_attn_weights);
  visit("scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx);
  visit("reorder_and_upcast_attn", c.reorder_and_upcast_attn);
  visit("use_cache", c.use_cache);
  visit("tie_word_embeddings", c.tie_word_embeddings);
  visit("bos_token_id", c.bos_token_id);
  visit("eos_token_id", c.eos_token_id);
  visit("pad_token_id", c.pad_token_id);
  visit("torch_dtype", c.torch_dtype);
}

// See Note [One field list per config]. RoPE's rope_scaling is read and written apart.
template <typename Config, typename Visit>
void llama_fields(Config& c, Visit&& visit) {
  visit("vocab_size", c.vocab_size);
  visit("hidden_size", c.hidden_size);
  visit("intermediate_size", c.intermediate_size);
  visit("num_hidden_layers", c.num_hidden_layers);
  visit("num_attention_heads", c.num_attention_heads);
  visit("num_key_value_heads", c.num_key_value_heads);
  visit("head_dim", c.head_dim);
  visit("hidden_act", c.hidden_act);
  visit("max_position_embeddings", c.max_position_embeddings);
  visit("initializer_range", c.initializer_range);
  visit("rms_norm_eps", c.rms_norm_eps);
  visit("use_cache", c.use_cache);
  visit("pad_token_id", c.pad_token_id);
  visit("bos_token_id", c.bos_token_id);
  visit("eos_token_id", c.eos_token_id);
  visit("pretraining_tp", c.pretraining_tp);
  visit("tie_word_embeddings", c.tie_word_embeddings);
  visit("rope_theta", c.rope_theta);
  visit("attention_bias", c.attention_bias);
  visit("attention_dropout", c.attention_dropout);
  visit("mlp_bias", c.mlp_bias);
  visit("torch_dtype", c.torch_dtype);
}

GPT2Config parse_gpt2(const FieldReader& in) {
  GPT2Config c;
  gpt2_fields(c, [&](const char* field, auto& value) { in.read(field, value); });
  in.read("dtype", c.torch_dtype);  // torch_dtype's name in newer transformers

  const std::string& s = in.source();
  require_positive(s, "vocab_size", c.vocab_size);
  require_positive(s, "n_positions", c.n_positions);
  require_positive(s, "n_embd", c.n_embd);
  require_positive(s, "n_layer", c.n_layer);
  require_positive(s, "n_head", c.n_head);
  if (c.n_inner) require_positive(s, "n_inner", *c.n_inner);
  require_divisible(s, "n_embd", c.n_embd, "n_head", c.n_head);
  require_probability(s, "resid_pdrop", c.resid_pdrop);
  require_probability(s, "embd_pdrop", c.embd_pdrop);
  require_attention_dropout(s, "attn_pdrop", c.attn_pdrop);
  require_positive(s, "layer_norm_epsilon", c.layer_norm_epsilon);
  require_non_negative(s, "initializer_range", c.initializer_range);
  // Both are GELU's tanh approximation; "gelu" (erf) and others have no kernel here.
  require_implemented(s, "activation_function", c.activation_function,
                      {"gelu_new", "gelu_pytorch_tanh"});
  return c;
}

// yarn's and longrope's fields, resolved as transformers 5.25 does (standardize_rope_params and
// the rope init functions; see Note [YaRN and LongRoPE] in backend/rope_parameters.h): the
// pretraining context L0 from a top-level original_max_position_embeddings (Phi-3 always has
// one: 4096 by default), else rope's own, else max_position_embeddings; a null or missing factor
// is max_position_embeddings / L0; the attention factor computed unless given.
void parse_yarn_or_longrope(const FieldReader& in, const FieldReader& params,
                            const std::string& where, const LlamaConfig& c, RopeScaling& scaling) {
  const auto number = [&](const char* key) -> std::optional<double> {
    const json* v = params.find(key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    double out = 0;
    params.read(key, out);
    return out;
  };
  int64_t l0 = c.max_position_embeddings;
  params.read("original_max_position_embeddings", l0);
  if (in.find("original_max_position_embeddings") != nullptr) {
    in.read("original_max_position_embeddings", l0);
  } else if (c.family == LlamaConfig::Family::phi3) {
    l0 = c.original_max_position_embeddings;
  }
  if (l0 < 1) {
    throw ValueError(
        str_cat(where, ": original_max_position_embeddings ", l0, " must be positive"));
  }
  scaling.original_max_position_embeddings = l0;
  scaling.factor = number("factor").value_or(static_cast<double>(c.max_position_embeddings) /
                                             static_cast<double>(l0));
  if (!(scaling.factor > 0.0)) {
    throw ValueError(str_cat(where, ": factor ", scaling.factor, " must be positive"));
  }
  const double f = scaling.factor;
  const auto mscale = [f](double m) { return f <= 1 ? 1.0 : 0.1 * m * std::log(f) + 1.0; };
  if (scaling.type == RopeScaling::Type::yarn) {
    const std::optional<double> m = number("mscale"), m_all = number("mscale_all_dim");
    scaling.attention_factor =
        number("attention_factor")
            .value_or(m && m_all && *m != 0 && *m_all != 0 ? mscale(*m) / mscale(*m_all)
                                                           : mscale(1.0));
    // `get("beta_fast") or 32`: a missing, null or zero beta is the default.
    scaling.beta_fast = number("beta_fast").value_or(0.0) != 0 ? *number("beta_fast") : 32.0;
    scaling.beta_slow = number("beta_slow").value_or(0.0) != 0 ? *number("beta_slow") : 1.0;
    const json* truncate = params.find("truncate");
    scaling.truncate = truncate == nullptr ||
                       (!truncate->is_null() && truncate->is_boolean() && truncate->get<bool>());
    if (truncate != nullptr && !truncate->is_null() && !truncate->is_boolean()) {
      params.fail_type("truncate", *truncate, "true or false");
    }
    return;
  }
  scaling.attention_factor =
      number("attention_factor")
          .value_or(f <= 1.0 ? 1.0
                             : std::sqrt(1.0 + std::log(f) / std::log(static_cast<double>(l0))));
  const int64_t half = c.effective_head_dim() / 2;
  if (half > RopeScaling::kMaxLongropeFactors) {
    throw NotImplementedError(str_cat(where, ": longrope with head_dim ", 2 * half,
                                      " is not implemented (headroom's limit is ",
                                      2 * RopeScaling::kMaxLongropeFactors, ")"));
  }
  for (const char* key : {"short_factor", "long_factor"}) {
    const json* list = params.find(key);
    if (list == nullptr || !list->is_array()) {
      throw ValueError(str_cat(where, ": rope_type 'longrope' needs '", key,
                               "', a list of head_dim / 2 = ", half, " numbers"));
    }
    if (static_cast<int64_t>(list->size()) != half) {
      throw ValueError(str_cat(where, ": ", key, " has ", list->size(),
                               " factors; it needs one per frequency, head_dim / 2 = ", half));
    }
    auto& out =
        std::string_view(key) == "short_factor" ? scaling.short_factor : scaling.long_factor;
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_number() || !((*list)[i].get<double>() > 0.0)) {
        throw ValueError(str_cat(where, ": ", key, "[", i, "] is ", (*list)[i].dump(),
                                 ", expected a positive number"));
      }
      out[i] = static_cast<float>((*list)[i].get<double>());
    }
  }
  scaling.factor_count = static_cast<int32_t>(half);
}

// RoPE as LlamaConfig describes it: rope_scaling null (or of type "default"), of type linear,
// dynamic, llama3, yarn or longrope with their fields (transformers' ROPE_VALIDATION_FUNCTIONS'
// keys; Phi-3's legacy "su" and "yarn" are longrope, as Phi3Config reads them), or, as newer
// transformers write it, the same in rope_parameters with rope_theta inside. A type or key
// headroom does not compute is refused: a silently unscaled RoPE would be another model.
void parse_rope_object(const FieldReader& in, const json* rope, const std::string& where,
                       std::string_view field, LlamaConfig& c);

// Gemma 3's rope_parameters as transformers 5 writes them, one object per layer type: the
// global layers' into rope_theta / rope_scaling, the sliding layers' (default RoPE only) into
// rope_local_base_freq.
void parse_gemma3_rope_parameters(const FieldReader& in, const json& rope, LlamaConfig& c) {
  const std::string where = str_cat(in.source(), ": rope_parameters");
  for (const auto& [key, value] : rope.items()) {
    if (key != "full_attention" && key != "sliding_attention") {
      throw NotImplementedError(str_cat(where, ": key '", key,
                                        "' is not implemented (headroom reads full_attention and "
                                        "sliding_attention)"));
    }
    if (!value.is_object()) in.fail_type("rope_parameters", value, "an object per layer type");
  }
  if (const auto full = rope.find("full_attention"); full != rope.end()) {
    parse_rope_object(in, &*full, where + ".full_attention", "rope_parameters", c);
  }
  if (const auto sliding = rope.find("sliding_attention"); sliding != rope.end()) {
    LlamaConfig local;
    local.rope_theta = c.rope_local_base_freq;
    const std::string local_where = where + ".sliding_attention";
    parse_rope_object(in, &*sliding, local_where, "rope_parameters", local);
    if (local.rope_scaling.type != RopeScaling::Type::standard) {
      throw NotImplementedError(str_cat(local_where,
                                        ": a scaled RoPE on Gemma 3's sliding layers is not "
                                        "implemented (headroom reads rope_type default there)"));
    }
    c.rope_local_base_freq = local.rope_theta;
  }
}

void parse_rope(const FieldReader& in, LlamaConfig& c) {
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    const json* rope = in.find(field);
    if (rope == nullptr || rope->is_null()) continue;
    if (!rope->is_object()) in.fail_type(field, *rope, "null or an object");
    if (c.family == LlamaConfig::Family::gemma3_text &&
        std::string_view(field) == "rope_parameters" &&
        (rope->contains("full_attention") || rope->contains("sliding_attention"))) {
      parse_gemma3_rope_parameters(in, *rope, c);
      continue;
    }
    parse_rope_object(in, rope, str_cat(in.source(), ": ", field), field, c);
  }
}

// One RoPE object (rope_scaling, rope_parameters or one layer type's): its type and keys into
// c.rope_scaling, its rope_theta into c.rope_theta. `where` names it in messages.
void parse_rope_object(const FieldReader& in, const json* rope, const std::string& where,
                       std::string_view field, LlamaConfig& c) {
  using Type = RopeScaling::Type;
  {
    const FieldReader params(*rope, where);
    std::string type = "default";
    params.read("type", type);  // the older spelling
    params.read("rope_type", type);
    if (c.family == LlamaConfig::Family::phi3 && (type == "su" || type == "yarn")) {
      type = "longrope";
    }
    RopeScaling scaling;
    std::vector<std::string> keys = {"type", "rope_type", "rope_theta", "partial_rotary_factor"};
    // transformers 5 writes Phi-3's partial_rotary_factor here; 1 (the whole head) is RoPE as
    // computed, any other is refused.
    double partial_rotary_factor = 1.0;
    params.read("partial_rotary_factor", partial_rotary_factor);
    if (partial_rotary_factor != 1.0) {
      throw NotImplementedError(str_cat(where, ": partial_rotary_factor ", partial_rotary_factor,
                                        " is not implemented (headroom rotates whole heads)"));
    }
    if (type == "default" || type == "none") {
      scaling.type = Type::standard;
    } else if (type == "linear" || type == "dynamic") {
      scaling.type = type == "linear" ? Type::linear : Type::dynamic;
      keys.insert(keys.end(), {"factor", "original_max_position_embeddings"});
    } else if (type == "llama3") {
      scaling.type = Type::llama3;
      keys.insert(keys.end(), {"factor", "low_freq_factor", "high_freq_factor",
                               "original_max_position_embeddings"});
      for (const char* required :
           {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
        if (params.find(required) == nullptr) {
          throw ValueError(str_cat(where, ": rope_type 'llama3' needs '", required, "'"));
        }
      }
    } else if (type == "yarn") {
      scaling.type = Type::yarn;
      keys.insert(keys.end(), {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale",
                               "mscale_all_dim", "original_max_position_embeddings", "truncate"});
    } else if (type == "longrope") {
      scaling.type = Type::longrope;
      keys.insert(keys.end(), {"factor", "attention_factor", "short_factor", "long_factor",
                               "original_max_position_embeddings"});
    } else {
      throw NotImplementedError(str_cat(where, ": rope_type '", type,
                                        "' is not implemented (headroom computes default, "
                                        "linear, dynamic, llama3, yarn and longrope RoPE)"));
    }
    for (const auto& [key, value] : rope->items()) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        throw NotImplementedError(
            str_cat(where, ": key '", key, "' of rope_type '", type, "' is not implemented"));
      }
    }
    params.read("rope_theta", c.rope_theta);
    if (scaling.type == Type::yarn || scaling.type == Type::longrope) {
      parse_yarn_or_longrope(in, params, where, c, scaling);
      c.rope_scaling = scaling;
      return;
    }
    if (scaling.type != Type::standard && params.find("factor") == nullptr) {
      throw ValueError(str_cat(where, ": rope_type '", type, "' needs 'factor'"));
    }
    params.read("factor", scaling.factor);
    params.read("low_freq_factor", scaling.low_freq_factor);
    params.read("high_freq_factor", scaling.high_freq_factor);
    params.read("original_max_position_embeddings", scaling.original_max_position_embeddings);
    if (!(scaling.factor > 0.0)) {
      throw ValueError(str_cat(where, ": factor ", scaling.factor, " must be positive"));
    }
    if (scaling.type == Type::llama3) {
      if (!(scaling.high_freq_factor > scaling.low_freq_factor) || !(scaling.low_freq_factor > 0)) {
        throw ValueError(str_cat(where, ": high_freq_factor ", scaling.high_freq_factor,
                                 " must exceed low_freq_factor ", scaling.low_freq_factor,
                                 ", which must be positive"));
      }
      if (scaling.original_max_position_embeddings < 1) {
        throw ValueError(str_cat(where, ": original_max_position_embeddings ",
                                 scaling.original_max_position_embeddings, " must be positive"));
      }
    }
    params.read("rope_theta", c.rope_theta);
    // rope_parameters of the default type after a scaled rope_scaling keeps the scaling.
    if (scaling.type != Type::standard || field == "rope_scaling") c.rope_scaling = scaling;
  }
}

// transformers' Qwen2Config defaults (Qwen2 7B's shape), where they differ from LlamaConfig's.
LlamaConfig qwen2_defaults() {
  LlamaConfig c;
  c.family = LlamaConfig::Family::qwen2;
  c.vocab_size = 151936;
  c.intermediate_size = 22016;
  c.num_key_value_heads = 32;
  c.max_position_embeddings = 32768;
  c.bos_token_id = std::nullopt;
  c.eos_token_id = {};
  return c;
}

// transformers' Qwen3Config defaults, where they differ from Qwen2Config's.
LlamaConfig qwen3_defaults() {
  LlamaConfig c = qwen2_defaults();
  c.family = LlamaConfig::Family::qwen3;
  c.head_dim = 128;
  return c;
}

// transformers' MistralConfig defaults (Mistral 7B's shape), where they differ from LlamaConfig's.
LlamaConfig mistral_defaults() {
  LlamaConfig c;
  c.family = LlamaConfig::Family::mistral;
  c.intermediate_size = 14336;
  c.num_key_value_heads = 8;
  c.max_position_embeddings = 4096 * 32;
  c.sliding_window = 4096;
  return c;
}

// transformers' Phi3Config defaults (Phi-3-mini's shape), where they differ from LlamaConfig's.
LlamaConfig phi3_defaults() {
  LlamaConfig c;
  c.family = LlamaConfig::Family::phi3;
  c.vocab_size = 32064;
  c.hidden_size = 3072;
  c.intermediate_size = 8192;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.eos_token_id = {32000};
  c.pad_token_id = 32000;
  return c;
}

// transformers' Gemma2Config defaults (Gemma 2 2B's shape), where they differ from LlamaConfig's.
LlamaConfig gemma2_defaults() {
  LlamaConfig c;
  c.family = LlamaConfig::Family::gemma2;
  c.vocab_size = 256000;
  c.hidden_size = 2304;
  c.intermediate_size = 9216;
  c.num_hidden_layers = 26;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 256;
  c.hidden_act = "gelu_pytorch_tanh";
  c.max_position_embeddings = 8192;
  c.pad_token_id = 0;
  c.eos_token_id = {1};
  c.bos_token_id = 2;
  c.tie_word_embeddings = true;
  c.sliding_window = 4096;
  c.attn_logit_softcapping = 50.0;
  c.final_logit_softcapping = 30.0;
  return c;
}

// transformers' Gemma3TextConfig defaults, where they differ from Gemma2Config's.
LlamaConfig gemma3_text_defaults() {
  LlamaConfig c = gemma2_defaults();
  c.family = LlamaConfig::Family::gemma3_text;
  c.vocab_size = 262208;
  c.max_position_embeddings = 131072;
  c.rope_theta = 1000000.0;
  c.attn_logit_softcapping.reset();
  c.final_logit_softcapping.reset();
  return c;
}

// layer_types, when present: one of full_attention / sliding_attention per layer, as transformers'
// configs list them; `allowed` the types headroom reads here.
std::vector<std::string> read_layer_types(const FieldReader& in, const LlamaConfig& c,
                                          const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  const json* types = in.find("layer_types");
  if (types == nullptr || types->is_null()) return out;
  if (!types->is_array()) in.fail_type("layer_types", *types, "a list of layer types");
  for (const json& type : *types) {
    if (!type.is_string() ||
        std::find(allowed.begin(), allowed.end(), type.get<std::string>()) == allowed.end()) {
      std::string names;
      for (const std::string& name : allowed) names += (names.empty() ? "" : " and ") + name;
      throw NotImplementedError(str_cat(in.source(), ": field 'layer_types' holds ",
                                        describe_json(type), "; headroom reads ", names,
                                        " layers here"));
    }
    out.push_back(type.get<std::string>());
  }
  if (static_cast<int64_t>(out.size()) != c.num_hidden_layers) {
    throw ValueError(str_cat(in.source(), ": field 'layer_types' lists ", out.size(),
                             " layers, not num_hidden_layers ", c.num_hidden_layers));
  }
  return out;
}

// Qwen2 / Qwen3's sliding window, as Qwen2Config builds it: the window is null unless
// use_sliding_window, and layer_types (when not given) slides layers from max_window_layers on.
void parse_qwen2_fields(const FieldReader& in, LlamaConfig& c) {
  in.read("use_sliding_window", c.use_sliding_window);
  in.read("sliding_window", c.sliding_window);
  in.read("max_window_layers", c.max_window_layers);
  c.layer_types = read_layer_types(in, c, {"full_attention", "sliding_attention"});
  const bool window = c.use_sliding_window && c.sliding_window.has_value();
  for (const std::string& type : c.layer_types) {
    // transformers fails to build the mask of such a layer (no sliding_window to apply).
    if (type == "sliding_attention" && !window) {
      throw ValueError(str_cat(in.source(), ": field 'layer_types' lists sliding_attention ",
                               "layers but the window is off (use_sliding_window ",
                               c.use_sliding_window ? "true" : "false", ", sliding_window ",
                               c.sliding_window ? std::to_string(*c.sliding_window) : "null", ")"));
    }
  }
  // Not Qwen2 / Qwen3 fields: transformers ignores them (Qwen2's q / k / v always have a bias,
  // its o_proj and MLP never; Qwen3's MLP never), and so does headroom.
  if (c.family == LlamaConfig::Family::qwen2) c.attention_bias = false;
  c.mlp_bias = false;
  c.pretraining_tp = 1;
}

// Mistral's: sliding_window on every layer. MistralModel ignores layer_types (a Ministral
// model's); one that names another type than the one Mistral applies is refused.
void parse_mistral_fields(const FieldReader& in, LlamaConfig& c) {
  in.read("sliding_window", c.sliding_window);
  const std::string applied = c.sliding_window ? "sliding_attention" : "full_attention";
  read_layer_types(in, c, {applied});
  // Not Mistral fields: transformers' Mistral has no biases and ignores them, as headroom does.
  c.attention_bias = false;
  c.mlp_bias = false;
  c.pretraining_tp = 1;
}

// Phi-3's: sliding_window on every layer; resid_pdrop (dropout on both residual branches) is not
// implemented and refused unless 0; RoPE beyond the default (longrope) is refused by parse_rope.
void parse_phi3_fields(const FieldReader& in, LlamaConfig& c) {
  in.read("sliding_window", c.sliding_window);
  in.read("original_max_position_embeddings", c.original_max_position_embeddings);
  in.read("embd_pdrop", c.embd_pdrop);
  double resid_pdrop = 0.0;
  in.read("resid_pdrop", resid_pdrop);
  if (resid_pdrop != 0.0) {
    throw NotImplementedError(str_cat(in.source(), ": field 'resid_pdrop' is ", resid_pdrop,
                                      "; headroom implements Phi-3 without residual dropout (0)"));
  }
  double partial_rotary_factor = 1.0;
  in.read("partial_rotary_factor", partial_rotary_factor);
  if (partial_rotary_factor != 1.0) {
    throw NotImplementedError(str_cat(in.source(), ": field 'partial_rotary_factor' is ",
                                      partial_rotary_factor, "; headroom rotates whole heads (1)"));
  }
  // Not Phi-3 fields: transformers' Phi3 has no biases and ignores them, as headroom does.
  c.attention_bias = false;
  c.mlp_bias = false;
  c.pretraining_tp = 1;
}

// Gemma 2 / Gemma 3's fields (transformers' Gemma2Config, Gemma3TextConfig). Read before RoPE:
// Gemma 3's older files give the sliding layers' base as rope_local_base_freq.
void parse_gemma_fields(const FieldReader& in, LlamaConfig& c) {
  const bool gemma3 = c.family == LlamaConfig::Family::gemma3_text;
  // hidden_activation is Gemma's name; hidden_act is not a Gemma field.
  c.hidden_act = "gelu_pytorch_tanh";
  in.read("hidden_activation", c.hidden_act);
  in.read("query_pre_attn_scalar", c.query_pre_attn_scalar);
  in.read("attn_logit_softcapping", c.attn_logit_softcapping);
  in.read("final_logit_softcapping", c.final_logit_softcapping);
  in.read("sliding_window", c.sliding_window);
  if (gemma3) {
    in.read("rope_local_base_freq", c.rope_local_base_freq);
    // The pattern of older files; transformers 5 writes it back as _sliding_window_pattern.
    in.read("_sliding_window_pattern", c.sliding_window_pattern);
    in.read("sliding_window_pattern", c.sliding_window_pattern);
  }
  const std::string& s = in.source();
  require_positive(s, "query_pre_attn_scalar", c.query_pre_attn_scalar);
  if (c.attn_logit_softcapping) {
    require_positive(s, "attn_logit_softcapping", *c.attn_logit_softcapping);
  }
  if (c.final_logit_softcapping) {
    require_positive(s, "final_logit_softcapping", *c.final_logit_softcapping);
  }
  require_positive(s, "sliding_window_pattern", c.sliding_window_pattern);
  require_positive(s, "rope_local_base_freq", c.rope_local_base_freq);
  if (const json* v = in.find("use_bidirectional_attention"); v && !v->is_null()) {
    if (!v->is_boolean()) in.fail_type("use_bidirectional_attention", *v, "true, false or null");
    if (v->get<bool>()) {
      throw NotImplementedError(str_cat(s, ": field 'use_bidirectional_attention' is true; ",
                                        "headroom implements causal attention only (false)"));
    }
  }
  c.layer_types = read_layer_types(in, c, {"full_attention", "sliding_attention"});
  if (c.layer_types.empty()) {
    // The pattern's list, as Gemma2Config / Gemma3TextConfig write it back (sliding_layer reads
    // the pattern while the list is still empty).
    std::vector<std::string> types;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      types.push_back(c.sliding_layer(i) ? "sliding_attention" : "full_attention");
    }
    c.layer_types = std::move(types);
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (c.sliding_layer(i) && !c.sliding_window) {
      throw ValueError(str_cat(s, ": layer ", i, " is a sliding_attention layer (field ",
                               "'layer_types') but field 'sliding_window' is null"));
    }
  }
  // Not Gemma fields: transformers' Gemma has no MLP bias and ignores them, as headroom does.
  c.mlp_bias = false;
  c.pretraining_tp = 1;
}

LlamaConfig parse_llama(const FieldReader& in, LlamaConfig c = {}) {
  llama_fields(c, [&](const char* field, auto& value) { in.read(field, value); });
  in.read("dtype", c.torch_dtype);  // torch_dtype's name in newer transformers
  if (c.gemma()) parse_gemma_fields(in, c);
  parse_rope(in, c);
  switch (c.family) {
    case LlamaConfig::Family::llama:
      break;
    case LlamaConfig::Family::qwen2:
    case LlamaConfig::Family::qwen3:
      parse_qwen2_fields(in, c);
      break;
    case LlamaConfig::Family::mistral:
      parse_mistral_fields(in, c);
      break;
    case LlamaConfig::Family::phi3:
      parse_phi3_fields(in, c);
      break;
    case LlamaConfig::Family::gemma2:
    case LlamaConfig::Family::gemma3_text:
      break;
  }

  const std::string& s = in.source();
  require_positive(s, "vocab_size", c.vocab_size);
  require_positive(s, "hidden_size", c.hidden_size);
  require_positive(s, "intermediate_size", c.intermediate_size);
  require_positive(s, "num_hidden_layers", c.num_hidden_layers);
  require_positive(s, "num_attention_heads", c.num_attention_heads);
  if (c.num_key_value_heads) {
    require_positive(s, "num_key_value_heads", *c.num_key_value_heads);
    require_divisible(s, "num_attention_heads", c.num_attention_heads, "num_key_value_heads",
                      *c.num_key_value_heads);
  }
  if (c.head_dim) {
    require_positive(s, "head_dim", *c.head_dim);
  } else {
    require_divisible(s, "hidden_size", c.hidden_size, "num_attention_heads",
                      c.num_attention_heads);
  }
  // Rotary embeddings rotate pairs of a head's dimensions.
  if (c.effective_head_dim() % 2 != 0) {
    throw ValueError(
        str_cat(s, ": the head dimension is ", c.effective_head_dim(),
                c.head_dim ? " (field 'head_dim')" : " (hidden_size / num_attention_heads)",
                "; rotary embeddings need an even one"));
  }
  require_positive(s, "max_position_embeddings", c.max_position_embeddings);
  if (c.sliding_window) require_positive(s, "sliding_window", *c.sliding_window);
  require_positive(s, "pretraining_tp", c.pretraining_tp);
  require_positive(s, "rms_norm_eps", c.rms_norm_eps);
  require_positive(s, "rope_theta", c.rope_theta);
  require_attention_dropout(s, "attention_dropout", c.attention_dropout);
  require_non_negative(s, "initializer_range", c.initializer_range);
  if (c.gemma()) {
    // GELU's tanh form, as Gemma's MLP applies it; Gemma 1's exact "gelu" has no kernel here.
    require_implemented(s, "hidden_activation", c.hidden_act, {"gelu_pytorch_tanh"});
  } else {
    require_implemented(s, "hidden_act", c.hidden_act, {"silu"});
  }
  return c;
}

// A field's value as config.json holds it.
template <typename T>
json field_json(const T& value) {
  return value;
}
json field_json(const std::optional<int64_t>& value) {
  return value ? json(*value) : json(nullptr);
}
json field_json(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }
// One token id as a number, as HF writes it; several as a list.
json field_json(const std::vector<int64_t>& ids) {
  if (ids.empty()) return nullptr;
  return ids.size() == 1 ? json(ids.front()) : json(ids);
}
json field_json(DType dtype) { return dtype_traits(dtype).torch_name; }

json gpt2_json(const GPT2Config& c) {
  json out = {{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}};
  gpt2_fields(c, [&](const char* field, const auto& value) { out[field] = field_json(value); });
  return out;
}

// rope_scaling as transformers 4.4x writes it; null when standard.
json rope_scaling_json(const RopeScaling& s) {
  using Type = RopeScaling::Type;
  switch (s.type) {
    case Type::standard:
      return nullptr;
    case Type::linear:
      return {{"factor", s.factor}, {"rope_type", "linear"}};
    case Type::dynamic:
      return {{"factor", s.factor}, {"rope_type", "dynamic"}};
    case Type::llama3:
      return {{"factor", s.factor},
              {"high_freq_factor", s.high_freq_factor},
              {"low_freq_factor", s.low_freq_factor},
              {"original_max_position_embeddings", s.original_max_position_embeddings},
              {"rope_type", "llama3"}};
    case Type::yarn: {
      // The attention factor as computed, so that mscale / mscale_all_dim need not be kept.
      json out = {{"attention_factor", s.attention_factor},
                  {"beta_fast", s.beta_fast},
                  {"beta_slow", s.beta_slow},
                  {"factor", s.factor},
                  {"original_max_position_embeddings", s.original_max_position_embeddings},
                  {"rope_type", "yarn"}};
      if (!s.truncate) out["truncate"] = false;
      return out;
    }
    case Type::longrope: {
      const auto factors = [&](const float* values) {
        return std::vector<double>(values, values + s.factor_count);
      };
      return {{"attention_factor", s.attention_factor},
              {"factor", s.factor},
              {"long_factor", factors(s.long_factor)},
              {"original_max_position_embeddings", s.original_max_position_embeddings},
              {"rope_type", "longrope"},
              {"short_factor", factors(s.short_factor)}};
    }
  }
  return nullptr;
}

// model_type and the architecture's class of each family.
std::pair<const char*, const char*> family_names(LlamaConfig::Family family) {
  using Family = LlamaConfig::Family;
  switch (family) {
    case Family::llama:
      break;
    case Family::qwen2:
      return {"qwen2", "Qwen2ForCausalLM"};
    case Family::qwen3:
      return {"qwen3", "Qwen3ForCausalLM"};
    case Family::mistral:
      return {"mistral", "MistralForCausalLM"};
    case Family::phi3:
      return {"phi3", "Phi3ForCausalLM"};
    case Family::gemma2:
      return {"gemma2", "Gemma2ForCausalLM"};
    case Family::gemma3_text:
      return {"gemma3_text", "Gemma3ForCausalLM"};
  }
  return {"llama", "LlamaForCausalLM"};
}

json llama_json(const LlamaConfig& c) {
  using Family = LlamaConfig::Family;
  const auto [type, architecture] = family_names(c.family);
  json out = {{"model_type", type}, {"architectures", {architecture}}};
  llama_fields(c, [&](const char* field, const auto& value) { out[field] = field_json(value); });
  out["rope_scaling"] = rope_scaling_json(c.rope_scaling);
  if (c.family != Family::llama) {
    for (const char* field : {"mlp_bias", "pretraining_tp"}) out.erase(field);
    if (c.family != Family::qwen3 && !c.gemma()) out.erase("attention_bias");
    out["sliding_window"] = field_json(c.sliding_window);
  }
  if (c.family == Family::qwen2 || c.family == Family::qwen3) {
    out["use_sliding_window"] = c.use_sliding_window;
    out["max_window_layers"] = c.max_window_layers;
    if (!c.layer_types.empty()) out["layer_types"] = c.layer_types;
  }
  if (c.gemma()) {
    out.erase("hidden_act");
    out["hidden_activation"] = c.hidden_act;
    // An int in transformers 5's strict Gemma configs (256, 144), which refuse 256.0.
    const double scalar = c.query_pre_attn_scalar;
    out["query_pre_attn_scalar"] = scalar == std::floor(scalar) && std::abs(scalar) < 9e15
                                       ? json(static_cast<int64_t>(scalar))
                                       : json(scalar);
    out["attn_logit_softcapping"] = field_json(c.attn_logit_softcapping);
    out["final_logit_softcapping"] = field_json(c.final_logit_softcapping);
    out["layer_types"] = c.layer_types;
    out["use_bidirectional_attention"] = false;
  }
  if (c.family == Family::gemma3_text) {
    // transformers 4 reads the top-level fields, 5 the nested rope_parameters.
    out["rope_local_base_freq"] = c.rope_local_base_freq;
    out["sliding_window_pattern"] = c.sliding_window_pattern;
    json full = rope_scaling_json(c.rope_scaling);
    if (full.is_null()) full = {{"rope_type", "default"}};
    full["rope_theta"] = c.rope_theta;
    out["rope_parameters"] = {
        {"full_attention", full},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_local_base_freq}}}};
  }
  if (c.family == Family::phi3) {
    out["original_max_position_embeddings"] = c.original_max_position_embeddings;
    // Phi-3's longrope as transformers 4.x validates it (exactly type, short_factor and
    // long_factor) when the rest follows from the context lengths, as Microsoft's files have it.
    const RopeScaling& r = c.rope_scaling;
    const double f = static_cast<double>(c.max_position_embeddings) /
                     static_cast<double>(c.original_max_position_embeddings);
    if (r.type == RopeScaling::Type::longrope &&
        r.original_max_position_embeddings == c.original_max_position_embeddings && r.factor == f &&
        r.attention_factor ==
            (f <= 1.0 ? 1.0
                      : std::sqrt(1.0 + std::log(f) / std::log(static_cast<double>(
                                                          c.original_max_position_embeddings))))) {
      out["rope_scaling"] = {{"long_factor", out["rope_scaling"]["long_factor"]},
                             {"short_factor", out["rope_scaling"]["short_factor"]},
                             {"type", "longrope"}};
    }
    out["embd_pdrop"] = c.embd_pdrop;
    out["resid_pdrop"] = 0.0;
  }
  // Left out when unset rather than written as null: transformers before 4.45 would keep a
  // null head_dim as an attribute and fail on it, while a missing one means the default.
  if (!c.head_dim) out.erase("head_dim");
  return out;
}

}  // namespace

HfConfig parse_hf_config(const std::string& json_text, const std::string& source_name) {
  const json config = parse_json(json_text, source_name);
  if (!config.is_object()) {
    throw ValueError(
        str_cat(source_name, ": config is ", describe_json(config), ", not an object"));
  }
  const FieldReader in(config, source_name);
  if (in.find("model_type") == nullptr) {
    throw ValueError(str_cat(source_name, ": field 'model_type' is missing; ", kReads));
  }
  std::string model_type;
  in.read("model_type", model_type);
  if (model_type == "gpt2") return parse_gpt2(in);
  if (model_type == "llama") return parse_llama(in);
  if (model_type == "qwen2") return parse_llama(in, qwen2_defaults());
  if (model_type == "qwen3") return parse_llama(in, qwen3_defaults());
  if (model_type == "mistral") return parse_llama(in, mistral_defaults());
  if (model_type == "phi3") return parse_llama(in, phi3_defaults());
  if (model_type == "gemma2") return parse_llama(in, gemma2_defaults());
  if (model_type == "gemma3_text") return parse_llama(in, gemma3_text_defaults());
  if (model_type == "gemma3") {
    // Gemma3ForConditionalGeneration: a vision tower beside the text model, whose weights live
    // under other names (model.language_model.*).
    throw NotImplementedError(str_cat(
        source_name, ": field 'model_type' is 'gemma3' (Gemma 3 with its vision tower, ",
        "text_config nested); headroom reads Gemma 3's text model, model_type 'gemma3_text'"));
  }
  throw ValueError(str_cat(source_name, ": field 'model_type' is '", model_type, "'; ", kReads));
}

HfConfig read_hf_config(const std::string& path) {
  const std::string file = config_path(path);
  return parse_hf_config(read_text_file(file), file);
}

std::string to_json(const HfConfig& config) {
  const json out = std::holds_alternative<GPT2Config>(config)
                       ? gpt2_json(std::get<GPT2Config>(config))
                       : llama_json(std::get<LlamaConfig>(config));
  // save_pretrained: json.dumps(config, indent=2, sort_keys=True) + "\n"; nlohmann::json keeps
  // its keys sorted.
  return out.dump(2) + "\n";
}

void write_hf_config(const std::string& path, const HfConfig& config) {
  write_file_atomically(config_path(path), to_json(config));
}

}  // namespace headroom
