// LoraConfig's checks, architecture defaults and adapter_config.json.
#include "peft/lora_config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace headroom {

double LoraConfig::scaling() const {
  const double rank = static_cast<double>(r);
  return use_rslora ? lora_alpha / std::sqrt(rank) : lora_alpha / rank;
}

void LoraConfig::validate() const {
  if (r <= 0) throw ValueError(str_cat("lora_r: ", r, " must be > 0"));
  if (!std::isfinite(lora_alpha)) {
    throw ValueError(str_cat("lora_alpha: ", lora_alpha, " must be a finite number"));
  }
  if (!(lora_dropout >= 0.0 && lora_dropout < 1.0)) {
    throw ValueError(str_cat("lora_dropout: ", lora_dropout, " is outside [0, 1)"));
  }
  for (const auto* list : {&target_modules, &modules_to_save}) {
    const char* field = list == &target_modules ? "lora_target_modules" : "lora_modules_to_save";
    for (const std::string& name : *list) {
      if (name.empty()) throw ValueError(str_cat(field, ": an empty module name"));
      if (name == "all-linear" && (list != &target_modules || list->size() != 1)) {
        throw ValueError(str_cat(field,
                                 ": 'all-linear' must be the only entry of "
                                 "lora_target_modules"));
      }
    }
  }
}

std::vector<std::string> split_module_names(const std::string& text) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string name = text.substr(start, comma - start);
    const size_t first = name.find_first_not_of(" \t");
    const size_t last = name.find_last_not_of(" \t");
    names.push_back(first == std::string::npos ? "" : name.substr(first, last - first + 1));
    start = comma + 1;
  }
  return names;
}

LoraBias parse_lora_bias(const std::string& text) {
  if (text == "none") return LoraBias::none;
  if (text == "all") return LoraBias::all;
  if (text == "lora_only") return LoraBias::lora_only;
  throw ValueError(str_cat("bias: '", text, "' is not one of none, all, lora_only"));
}

const char* lora_bias_name(LoraBias bias) {
  switch (bias) {
    case LoraBias::none:
      return "none";
    case LoraBias::all:
      return "all";
    case LoraBias::lora_only:
      return "lora_only";
  }
  return "none";
}

std::string hf_model_type(const HfConfig& config) {
  if (std::holds_alternative<GPT2Config>(config)) return "gpt2";
  switch (std::get<LlamaConfig>(config).family) {
    case LlamaConfig::Family::llama:
      return "llama";
    case LlamaConfig::Family::qwen2:
      return "qwen2";
    case LlamaConfig::Family::qwen3:
      return "qwen3";
    case LlamaConfig::Family::mistral:
      return "mistral";
    case LlamaConfig::Family::phi3:
      return "phi3";
    case LlamaConfig::Family::gemma2:
      return "gemma2";
    case LlamaConfig::Family::gemma3_text:
      return "gemma3_text";
  }
  return "llama";
}

std::vector<std::string> default_lora_target_modules(const HfConfig& config) {
  // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: llama, qwen2, qwen3, mistral,
  // gemma2 and gemma3_text alike. It has no phi3 entry, so PEFT refuses a Phi-3 LoRA without
  // target_modules; so does headroom, rather than guess.
  if (std::holds_alternative<GPT2Config>(config)) return {"c_attn"};
  if (std::get<LlamaConfig>(config).family == LlamaConfig::Family::phi3) {
    throw ValueError(
        "lora_target_modules: Phi-3 has no default target modules (PEFT has none for model_type "
        "phi3); name them, e.g. qkv_proj, or qkv_proj,o_proj,gate_up_proj,down_proj, or "
        "all-linear");
  }
  return {"q_proj", "v_proj"};
}

namespace {

// PEFT writes lora_alpha as the int or float it was given; an integral value as an int.
nlohmann::json number(double value) {
  if (std::nearbyint(value) == value && std::fabs(value) < 9e15) {
    return static_cast<int64_t>(value);
  }
  return value;
}

nlohmann::json name_list_or_null(const std::vector<std::string>& names) {
  return names.empty() ? nlohmann::json(nullptr) : nlohmann::json(names);
}

}  // namespace

std::string lora_adapter_config_json(const LoraConfig& config, const HfConfig& model) {
  // The keys PEFT 0.21.2's LoraConfig.to_dict() writes, with the values of a plain LoRA.
  // nlohmann::json keeps keys sorted, as Python's sort_keys; dump(2) is json.dumps(indent=2).
  nlohmann::json j;
  for (const char* key :
       {"alora_invocation_tokens", "arrow_config", "auto_mapping", "corda_config", "eva_config",
        "exclude_modules", "kasa_config", "layer_replication", "layers_pattern",
        "layers_to_transform", "lora_ga_config", "megatron_config", "monteclora_config",
        "target_parameters", "trainable_token_indices", "use_bdlora", "velora_config"}) {
    j[key] = nullptr;
  }
  for (const char* key : {"alpha_pattern", "loftq_config", "rank_pattern"}) {
    j[key] = nlohmann::json::object();
  }
  for (const char* key : {"ensure_weight_tying", "lora_bias", "use_dora", "use_qalora"}) {
    j[key] = false;
  }
  j["base_model_name_or_path"] = config.base_model_name_or_path.empty()
                                     ? nlohmann::json(nullptr)
                                     : nlohmann::json(config.base_model_name_or_path);
  j["bias"] = lora_bias_name(config.bias);
  j["fan_in_fan_out"] = std::holds_alternative<GPT2Config>(model);
  j["inference_mode"] = true;
  switch (config.init_lora_weights) {
    case LoraInit::kaiming:
      j["init_lora_weights"] = true;
      break;
    case LoraInit::gaussian:
      j["init_lora_weights"] = "gaussian";
      break;
    case LoraInit::random:
      j["init_lora_weights"] = false;
      break;
  }
  j["lora_alpha"] = number(config.lora_alpha);
  j["lora_dropout"] = config.lora_dropout;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = name_list_or_null(config.modules_to_save);
  j["peft_type"] = "LORA";
  j["peft_version"] = kPeftFormatVersion;
  j["qalora_group_size"] = 16;
  j["r"] = config.r;
  j["revision"] =
      config.revision.empty() ? nlohmann::json(nullptr) : nlohmann::json(config.revision);
  const std::vector<std::string> targets =
      config.target_modules.empty() ? default_lora_target_modules(model) : config.target_modules;
  j["target_modules"] = targets.size() == 1 && targets[0] == "all-linear"
                            ? nlohmann::json("all-linear")
                            : nlohmann::json(targets);
  j["task_type"] = "CAUSAL_LM";
  j["use_rslora"] = config.use_rslora;
  return j.dump(2);
}

namespace {

// A key PEFT may write whose non-default value asks for something headroom does not build.
void refuse_unless_default(const nlohmann::json& json, const std::string& path, const char* key) {
  if (!json.contains(key)) return;
  const nlohmann::json& v = json.at(key);
  const bool absent = v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
                      ((v.is_object() || v.is_array()) && v.empty());
  if (!absent) {
    throw ValueError(str_cat(path, ": ", key, " = ", v.dump(),
                             " is not supported (headroom builds plain LoRA)"));
  }
}

}  // namespace

LoraConfig parse_lora_adapter_config(const nlohmann::json& json, const std::string& path) {
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!json.contains(key)) throw ValueError(str_cat(path, ": ", key, " is missing"));
    return json.at(key);
  };
  auto bad = [&](const char* key, const nlohmann::json& v, const char* want) {
    return ValueError(str_cat(path, ": ", key, " = ", v.dump(), " (", want, ")"));
  };
  if (!json.is_object()) throw ValueError(str_cat(path, ": not a JSON object"));
  const nlohmann::json& type = field("peft_type");
  if (type != "LORA") throw bad("peft_type", type, "only LORA adapters are read");
  for (const char* key :
       {"use_dora", "rank_pattern", "alpha_pattern", "layers_to_transform", "layer_replication",
        "lora_bias", "use_qalora", "exclude_modules", "trainable_token_indices",
        "target_parameters", "alora_invocation_tokens", "arrow_config", "kasa_config",
        "monteclora_config", "use_bdlora", "velora_config"}) {
    refuse_unless_default(json, path, key);
  }
  LoraConfig config;
  const nlohmann::json& r = field("r");
  if (!r.is_number_integer() || r.get<int64_t>() <= 0) throw bad("r", r, "an integer > 0");
  config.r = r.get<int64_t>();
  const nlohmann::json& alpha = field("lora_alpha");
  if (!alpha.is_number()) throw bad("lora_alpha", alpha, "a number");
  config.lora_alpha = alpha.get<double>();
  if (json.contains("lora_dropout")) {
    const nlohmann::json& p = json.at("lora_dropout");
    if (!p.is_number()) throw bad("lora_dropout", p, "a number in [0, 1)");
    config.lora_dropout = p.get<double>();
  }
  if (json.contains("use_rslora")) {
    const nlohmann::json& v = json.at("use_rslora");
    if (!v.is_boolean()) throw bad("use_rslora", v, "true or false");
    config.use_rslora = v.get<bool>();
  }
  const nlohmann::json& targets = field("target_modules");
  if (targets.is_string()) {
    // PEFT takes any other string as a regular expression over module names.
    if (targets != "all-linear")
      throw bad("target_modules", targets, "a list of names or \"all-linear\"");
    config.target_modules = {"all-linear"};
  } else if (targets.is_array() && !targets.empty()) {
    for (const nlohmann::json& t : targets) {
      if (!t.is_string()) throw bad("target_modules", targets, "a list of names");
      config.target_modules.push_back(t.get<std::string>());
    }
  } else {
    throw bad("target_modules", targets, "a non-empty list of names or \"all-linear\"");
  }
  if (json.contains("bias")) {
    const nlohmann::json& b = json.at("bias");
    if (!b.is_string()) throw bad("bias", b, "none, all or lora_only");
    try {
      config.bias = parse_lora_bias(b.get<std::string>());
    } catch (const ValueError&) {
      throw bad("bias", b, "none, all or lora_only");
    }
  }
  if (json.contains("modules_to_save") && !json.at("modules_to_save").is_null()) {
    const nlohmann::json& m = json.at("modules_to_save");
    if (!m.is_array()) throw bad("modules_to_save", m, "a list of names or null");
    for (const nlohmann::json& t : m) {
      if (!t.is_string()) throw bad("modules_to_save", m, "a list of names");
      config.modules_to_save.push_back(t.get<std::string>());
    }
  }
  if (json.contains("base_model_name_or_path") && json.at("base_model_name_or_path").is_string()) {
    config.base_model_name_or_path = json.at("base_model_name_or_path").get<std::string>();
  }
  if (json.contains("revision") && json.at("revision").is_string()) {
    config.revision = json.at("revision").get<std::string>();
  }
  try {
    config.validate();
  } catch (const ValueError& e) {
    throw ValueError(str_cat(path, ": ", e.what()));
  }
  return config;
}

}  // namespace headroom
