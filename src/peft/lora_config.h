// LoraConfig: PEFT's LoRA hyper-parameters (tuners/lora/config.py) with its defaults, checked once,
// and the adapter_config.json PEFT writes and reads beside an adapter's weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/model_config.h"

namespace headroom {

// Which biases train beside the adapters (PEFT's bias): none, every bias of the model, or those
// of the layers LoRA wraps.
enum class LoraBias { none, all, lora_only };

// PEFT's init_lora_weights: true (A kaiming-uniform(a=√5), B zeros: the adapter starts as the
// identity), "gaussian" (A ~ N(0, 1/r), B zeros), false (B kaiming-uniform too: not the identity,
// for tests).
enum class LoraInit { kaiming, gaussian, random };

struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  bool use_rslora = false;
  // Names or dotted suffixes of the linear layers to wrap ("q_proj", "attn.c_attn"), or the one
  // entry "all-linear" (every projection but the output layer). Empty: the architecture's
  // default (PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
  std::vector<std::string> target_modules = {};
  LoraBias bias = LoraBias::none;
  // Modules trained in full and saved with the adapter (e.g. "lm_head"), matched as targets are.
  std::vector<std::string> modules_to_save = {};
  LoraInit init_lora_weights = LoraInit::kaiming;
  std::string base_model_name_or_path = "";  // written to adapter_config.json
  std::string revision = "";                 // idem; empty for null

  // alpha / r, or alpha / √r with rsLoRA.
  double scaling() const;
  // ValueError naming the field (with TRL's option name) and value: r <= 0, alpha not finite,
  // dropout outside [0, 1), an empty target name, "all-linear" beside other names.
  void validate() const;
};

// "q_proj, v_proj" -> {"q_proj", "v_proj"} (TRL's list options as one text); "" -> {}.
std::vector<std::string> split_module_names(const std::string& text);

LoraBias parse_lora_bias(const std::string& text);
const char* lora_bias_name(LoraBias bias);

// The default target modules of `config`'s architecture: GPT-2 {"c_attn"}, Llama, Qwen2, Qwen3 and
// Mistral {"q_proj", "v_proj"}; Phi-3 has none (ValueError naming lora_target_modules), as PEFT.
std::vector<std::string> default_lora_target_modules(const HfConfig& config);
// HF's model_type: "gpt2" or "llama".
std::string hf_model_type(const HfConfig& config);

// The PEFT release whose adapter_config.json keys headroom writes (peft_version in the file).
inline constexpr const char* kPeftFormatVersion = "0.21.2";

// adapter_config.json as PEFT writes it (its keys, json.dumps(indent=2, sort_keys=True)).
// fan_in_fan_out is true for GPT-2 (Conv1D weights), as PEFT forces it.
std::string lora_adapter_config_json(const LoraConfig& config, const HfConfig& model);
// The LoraConfig of a PEFT adapter_config.json (`path` names the file in errors): peft_type must
// be "LORA"; features headroom does not build (DoRA, rank / alpha patterns, layers_to_transform,
// a regular-expression target_modules) are refused naming the field and value.
LoraConfig parse_lora_adapter_config(const nlohmann::json& json, const std::string& path);

}  // namespace headroom
