// LoRA injection, adapter files and merging on headroom's causal LMs.
#include "peft/lora_model.h"

#include <filesystem>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/storage.h"
#include "core/json_file.h"
#include "io/safetensors.h"
#include "nn/layers.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "peft/lora_layer.h"

namespace headroom {

namespace fs = std::filesystem;

namespace {

// PEFT's check_target_module_exists for a list: the path itself or a dotted suffix of it.
bool matches(const std::string& path, const std::string& target) {
  if (path == target) return true;
  return path.size() > target.size() &&
         path.compare(path.size() - target.size(), target.size(), target) == 0 &&
         path[path.size() - target.size() - 1] == '.';
}

std::string last_component(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// The linear layers of `model` (no adapter's own A and B), by path.
std::vector<std::pair<std::string, AdaptableLinear*>> base_linears(CausalLM& model) {
  std::vector<std::pair<std::string, AdaptableLinear*>> out;
  std::set<const Module*> adapter_parts;
  for (auto& [path, module] : model.named_modules()) {
    if (auto* lora = dynamic_cast<LoraLayer*>(module)) {
      for (auto& [sub, part] : lora->named_modules()) adapter_parts.insert(part);
    }
  }
  for (auto& [path, module] : model.named_modules()) {
    auto* linear = dynamic_cast<AdaptableLinear*>(module);
    if (linear && !adapter_parts.count(module)) out.emplace_back(path, linear);
  }
  return out;
}

std::string layer_names(const std::vector<std::pair<std::string, AdaptableLinear*>>& linears) {
  std::set<std::string> names;
  for (const auto& [path, linear] : linears) names.insert(last_component(path));
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ", ") + n;
  return joined;
}

}  // namespace

std::vector<std::string> apply_lora(CausalLM& model, const LoraConfig& config, Generator* generator,
                                    std::optional<DType> adapter_dtype) {
  config.validate();
  const HfConfig hf = model.config();
  const std::vector<std::string> targets =
      config.target_modules.empty() ? default_lora_target_modules(hf) : config.target_modules;
  const bool all_linear = targets.size() == 1 && targets[0] == "all-linear";
  const auto linears = base_linears(model);

  std::vector<AdaptableLinear*> chosen;
  std::vector<std::string> paths;
  std::set<std::string> used;
  for (const auto& [path, linear] : linears) {
    if (linear->adapter()) {
      throw ValueError(str_cat("lora: layer '", path, "' already has an adapter"));
    }
    bool take = false;
    if (all_linear) {
      take = path != "lm_head";  // PEFT's all-linear leaves the output layer out
    } else {
      for (const std::string& t : targets) {
        if (matches(path, t)) {
          take = true;
          used.insert(t);
        }
      }
    }
    if (take) {
      chosen.push_back(linear);
      paths.push_back(path);
    }
  }
  if (!all_linear) {
    for (const std::string& t : targets) {
      if (!used.count(t)) {
        throw ValueError(str_cat("lora_target_modules: '", t, "' matches no linear layer of the ",
                                 hf_model_type(hf), " model (it has ", layer_names(linears), ")"));
      }
    }
  }

  // The module paths whose parameters train in full (modules_to_save).
  std::vector<std::string> saved_modules;
  for (const std::string& m : config.modules_to_save) {
    bool found = false;
    for (auto& [path, module] : model.named_modules()) {
      if (!path.empty() && matches(path, m)) {
        saved_modules.push_back(path);
        found = true;
      }
    }
    if (!found) {
      throw ValueError(str_cat("lora_modules_to_save: '", m, "' matches no module of the ",
                               hf_model_type(hf), " model"));
    }
  }

  for (const Tensor& p : model.parameters()) p.set_requires_grad(false);
  Generator& gen = generator ? *generator : default_generator();
  for (AdaptableLinear* layer : chosen) {
    layer->set_adapter(std::make_unique<LoraLayer>(
        layer->in_features(), layer->out_features(), config, layer->device(),
        adapter_dtype.value_or(layer->compute_dtype()), &gen));
    const auto* linear = dynamic_cast<const Linear*>(layer);
    if (config.bias == LoraBias::lora_only && linear && linear->bias().defined()) {
      linear->bias().set_requires_grad(true);
    }
  }
  for (auto& [name, p] : model.named_parameters()) {
    const bool lora =
        name.find("lora_A.") != std::string::npos || name.find("lora_B.") != std::string::npos;
    const bool bias = config.bias == LoraBias::all && last_component(name) == "bias";
    bool saved = false;
    for (const std::string& m : saved_modules) saved = saved || name.rfind(m + ".", 0) == 0;
    if (lora || bias || saved) p.set_requires_grad(true);
  }
  model.train(model.is_training());  // the new layers follow the model's mode
  return paths;
}

int64_t store_frozen_projections(CausalLM& model, DType compute_dtype) {
  int64_t saved = 0;
  for (auto& [path, layer] : base_linears(model)) {
    auto* linear = dynamic_cast<Linear*>(layer);  // a 4-bit base is stored as it is
    if (!linear || linear->weight_4bit() || path == "lm_head" ||
        linear->weight().dtype() == compute_dtype) {
      continue;
    }
    const Tensor& b = linear->bias();
    if (linear->weight().requires_grad() || (b.defined() && b.requires_grad())) continue;
    const int64_t before = static_cast<int64_t>(linear->weight().nbytes()) +
                           (b.defined() ? static_cast<int64_t>(b.nbytes()) : 0);
    linear->to(compute_dtype, /*recurse=*/false);
    saved += before - static_cast<int64_t>(linear->weight().nbytes()) -
             (linear->bias().defined() ? static_cast<int64_t>(linear->bias().nbytes()) : 0);
  }
  return saved;
}

std::vector<std::pair<std::string, Tensor>> lora_state_dict(const CausalLM& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : model.named_parameters()) {
    if (p.requires_grad()) out.emplace_back(name, p);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> lora_file_tensors(const CausalLM& model) {
  // PEFT wraps a targeted layer, so that layer's own weight and bias sit under "base_layer".
  std::set<std::string> wrapped;
  for (auto& [path, linear] : base_linears(const_cast<CausalLM&>(model))) {
    if (linear->adapter()) wrapped.insert(path);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : lora_state_dict(model)) {
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string key =
        wrapped.count(owner) ? str_cat(owner, ".base_layer", name.substr(dot)) : name;
    out.emplace_back(kAdapterKeyPrefix + key, p);
  }
  return out;
}

void save_lora_adapter(const CausalLM& model, const LoraConfig& config, const std::string& dir) {
  fs::create_directories(dir);
  const std::vector<std::pair<std::string, Tensor>> tensors = lora_file_tensors(model);
  save_safetensors((fs::path(dir) / kAdapterWeightsFile).string(), tensors, {{"format", "pt"}});
  write_file_atomically((fs::path(dir) / kAdapterConfigFile).string(),
                        lora_adapter_config_json(config, model.config()));
}

LoraConfig load_lora_adapter(CausalLM& model, const std::string& dir,
                             std::optional<DType> adapter_dtype) {
  const fs::path config_path = fs::path(dir) / kAdapterConfigFile;
  const fs::path weights_path = fs::path(dir) / kAdapterWeightsFile;
  for (const fs::path& p : {config_path, weights_path}) {
    if (!fs::is_regular_file(p)) {
      throw ValueError(str_cat("adapter: ", p.string(), " is missing"));
    }
  }
  const std::string config_file = config_path.string();
  const LoraConfig config =
      parse_lora_adapter_config(parse_json(read_text_file(config_file), config_file), config_file);
  try {
    apply_lora(model, config, nullptr, adapter_dtype);
  } catch (const ValueError& e) {
    // Named as the file's fields: target_modules, modules_to_save.
    std::string message = e.what();
    if (message.starts_with("lora_")) message = message.substr(5);
    throw ValueError(str_cat(config_file, ": ", message));
  }
  load_lora_weights(model, SafetensorsCheckpoint(weights_path.string()));
  return config;
}

void load_lora_weights(CausalLM& model, const SafetensorsCheckpoint& file) {
  std::set<std::string> used;
  NoGradGuard no_grad;
  for (auto& [key, p] : lora_file_tensors(model)) {
    if (!file.contains(key)) {
      throw ValueError(str_cat(file.path(), ": tensor '", key,
                               "' is missing (the model needs it with shape ", p.shape(), ")"));
    }
    used.insert(key);
    // Another rank's ZeRO-3 share (its memory released here): its owner reads it.
    if (!p.storage()->materialized()) continue;
    file.copy_into(key, p);
  }
  // PEFT saves the base weight of an output or embedding layer it wraps (save_embedding_layers
  // "auto": <layer>.base_layer.weight) and loads it back into the base: so does this.
  for (auto& [path, layer] : base_linears(model)) {
    const std::string key = str_cat(kAdapterKeyPrefix, path, ".base_layer.weight");
    if (!layer->adapter() || used.count(key) || !file.contains(key)) continue;
    const Tensor* weight = nullptr;
    if (auto* tied = dynamic_cast<TiedLinear*>(layer)) weight = &tied->weight();
    auto* linear = dynamic_cast<Linear*>(layer);
    if (linear && !linear->weight_4bit()) weight = &linear->weight();
    if (!weight) continue;  // a 4-bit base: refused below as unexpected
    if (weight->storage()->materialized()) file.copy_into(key, *weight);
    used.insert(key);
  }
  for (const std::string& key : file.names()) {
    if (!used.count(key)) {
      throw ValueError(str_cat(file.path(), ": unexpected tensor '", key,
                               "' (the model with this adapter has no such parameter)"));
    }
  }
}

int64_t merge_lora(CausalLM& model) {
  NoGradGuard no_grad;
  int64_t merged = 0;
  for (auto& [path, layer] : base_linears(model)) {
    const auto* lora = dynamic_cast<const LoraLayer*>(layer->adapter());
    if (!lora) continue;
    if (dynamic_cast<TiedLinear*>(layer)) {
      throw NotImplementedError(
          str_cat("merge: layer '", path,
                  "' shares the input embedding's weight (tied word "
                  "embeddings); merging its adapter would change the embedding too (not built)"));
    }
    auto* linear = dynamic_cast<Linear*>(layer);
    if (!linear || linear->weight_4bit()) {
      throw NotImplementedError(str_cat("merge: layer '", path,
                                        "' is not a full-precision Linear (dequantize_linears "
                                        "makes a 4-bit base one first)"));
    }
    // PEFT's get_delta_weight: transpose(B @ A, fan_in_fan_out) * scaling, in fp32 here.
    Tensor delta = matmul(lora->lora_B().to(DType::f32), lora->lora_A().to(DType::f32));
    if (linear->layout() == WeightLayout::in_out) delta = delta.transpose(0, 1);
    const Tensor& w = linear->weight();
    if (w.dtype() == DType::f32) {
      w.add_(scale(delta, lora->scaling()));
    } else {
      w.copy_(add(w.to(DType::f32), scale(delta, lora->scaling())));
    }
    linear->remove_adapter();
    ++merged;
  }
  return merged;
}

}  // namespace headroom
