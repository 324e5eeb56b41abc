// Loading and saving HF model directories.
#include "io/pretrained.h"

#include <filesystem>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/grad_mode.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace headroom {

namespace {

bool has_weights(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "model.safetensors") ||
         std::filesystem::exists(dir / "model.safetensors.index.json");
}

bool is_gpt2(const CausalLM& model) {
  return std::holds_alternative<GPT2Config>(model.config());
}

}  // namespace

std::unique_ptr<CausalLM> load_pretrained(const std::string& dir, Device device, uint64_t seed) {
  const std::filesystem::path path(dir);
  const std::filesystem::path config_path = path / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw ValueError(str_cat(dir, ": no config.json in the model directory"));
  }
  std::unique_ptr<CausalLM> model = make_causal_lm(read_hf_config(config_path.string()), device, seed);
  if (has_weights(path)) load_weights(*model, SafetensorsCheckpoint(dir));
  return model;
}

void load_weights(CausalLM& model, const SafetensorsCheckpoint& checkpoint) {
  const bool gpt2 = is_gpt2(model);
  bool prefixed = true;
  if (gpt2) {
    prefixed = false;
    for (const std::string& name : checkpoint.names()) {
      if (name.rfind("transformer.", 0) == 0) prefixed = true;
    }
  }
  static const std::regex gpt2_buffer(R"((transformer\.)?h\.\d+\.attn\.(bias|masked_bias))");
  std::set<std::string> tied;
  for (const std::string& name : model.tied_parameter_names()) tied.insert(name);

  std::set<std::string> used;
  NoGradGuard no_grad;
  for (const auto& [name, param] : model.named_parameters()) {
    std::string stored = name;
    if (!prefixed && name.rfind("transformer.", 0) == 0) stored = name.substr(12);
    if (!checkpoint.contains(stored)) {
      throw ValueError(str_cat(checkpoint.path(), ": tensor '", stored,
                               "' is missing (the model needs it with shape ", param.shape(),
                               ")"));
    }
    checkpoint.copy_into(stored, param);
    used.insert(stored);
  }
  for (const std::string& name : checkpoint.names()) {
    if (used.count(name) || tied.count(name)) continue;
    if (gpt2 && std::regex_match(name, gpt2_buffer)) continue;
    throw ValueError(str_cat(checkpoint.path(), ": unexpected tensor '", name,
                             "' (the model has no parameter of that name)"));
  }
}

void save_pretrained(const CausalLM& model, const std::string& dir, size_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  write_hf_config((std::filesystem::path(dir) / "config.json").string(), model.config());
  // HF refuses safetensors files whose metadata does not say which framework wrote them.
  save_safetensors_checkpoint(dir, model.named_parameters(), max_shard_bytes, {{"format", "pt"}});
}

}  // namespace headroom
