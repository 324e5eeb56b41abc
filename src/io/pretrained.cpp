// Loading and saving HF model directories.
#include "io/pretrained.h"

#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/storage.h"
#include "core/atomic_file.h"
#include "io/hf_config.h"
#include "core/json_file.h"
#include "io/safetensors.h"
#include "memory/host_pool.h"
#include "nn/linear_4bit.h"

namespace headroom {

namespace {

bool has_weights(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "model.safetensors") ||
         std::filesystem::exists(dir / "model.safetensors.index.json");
}

bool is_gpt2(const CausalLM& model) { return std::holds_alternative<GPT2Config>(model.config()); }

// True when the files hold bitsandbytes' state of the 4-bit weight `weight_name`.
bool is_quant_4bit_saved(const SafetensorsCheckpoint& checkpoint, const std::string& weight_name) {
  return checkpoint.contains(weight_name + ".quant_state.bitsandbytes__nf4") ||
         checkpoint.contains(weight_name + ".quant_state.bitsandbytes__fp4");
}

}  // namespace

// Note [Materializing one tensor at a time]
// transformers' from_pretrained(torch_dtype=..., quantization_config=...) never holds the model
// in fp32: it builds it empty and fills it tensor by tensor. load_pretrained does the same: the
// model is built on a scratch meta device (meta:1: no memory, and no plan counts it), then
// Module::materialize_parameters makes each
// parameter in named_parameters order, on the target device in options.dtype, read from the
// files with the conversion inside copy_into, or drawn by the model's init_parameter straight
// into that dtype (the generator advanced as the constructor does; the bits those of an fp32 draw
// rounded, Note [Drawing in the target dtype]). A layer that turns 4-bit reads its weight (or
// bitsandbytes' saved state), quantizes it and drops it before the next tensor, so the peak is
// the model in its final form plus one layer's weight in options.dtype.
//
// Note [Drawing in the target dtype]
// Tensor::normal_ and uniform_ compute each sample in fp32 from the Philox stream (element i
// from counter offset + i, the same numbers reserved whatever the dtype) and round it once into
// the tensor's dtype, on the CPU (draw_kernel's convert_from_f32) as on CUDA (store_from_f32),
// with the rounding of copy_ from f32. So a bf16 or f16 parameter drawn directly equals the fp32
// draw cast afterwards, bit for bit (tests/nn/test_models.cpp checks it), and the largest
// fp32 tensor of the init (a 128256 x 4096 embedding is 2 GiB) never exists.
namespace {

void check_load_dtype(const std::string& source, DType dtype) {
  if (!is_floating(dtype) || dtype_size(dtype) < 2) {
    throw ValueError(str_cat(source, ": dtype ", dtype_name(dtype),
                             " is not one to load a model in (f32, bf16 or f16)"));
  }
}

// The model `config` describes, materialized as the Note says: from `checkpoint` when there is
// one, else by HF's init; `quant` (already checked) makes its layers 4-bit, `prequantized` when
// the files hold bitsandbytes' state.
std::unique_ptr<CausalLM> materialize_causal_lm(const HfConfig& config,
                                                const SafetensorsCheckpoint* checkpoint,
                                                const std::optional<Quant4bitConfig>& quant,
                                                bool prequantized, Device compute, uint64_t seed,
                                                const LoadOptions& options) {
  // Built on the scratch meta device, whose allocations no plan on meta:0 sees, so a dry run of
  // this load counts only what the materialization below allocates, as the real run does.
  std::unique_ptr<CausalLM> model = make_causal_lm(config, Device{DeviceType::meta, 1}, seed);

  // The layers that become 4-bit, by the name of their weight.
  std::map<std::string, Linear*> targets;
  if (quant) {
    for (auto& [name, module] : model->named_modules()) {
      auto* layer = dynamic_cast<Linear*>(module);
      if (layer && !is_skipped_module(name, options.skip_modules))
        targets[name + ".weight"] = layer;
    }
  }
  // The parameters made in frozen_linear_dtype, by name.
  std::set<std::string> frozen;
  if (options.frozen_linear_dtype) {
    for (auto& [name, module] : model->named_modules()) {
      const auto* layer = dynamic_cast<const Linear*>(module);
      if (!layer || is_skipped_module(name, options.skip_modules) ||
          is_skipped_module(name, options.keep_modules)) {
        continue;
      }
      frozen.insert(name + ".weight");
      frozen.insert(name + ".bias");
    }
  }
  const bool gpt2 = is_gpt2(*model);
  bool prefixed = true;
  if (checkpoint && gpt2) {
    prefixed = false;
    for (const std::string& name : checkpoint->names()) {
      if (name.rfind("transformer.", 0) == 0) prefixed = true;
    }
  }
  auto stored = [&](const std::string& name) {
    return !prefixed && name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
  };
  std::set<std::string> used;
  auto load = [&](const std::string& name) -> Tensor {
    if (!checkpoint->contains(name)) return Tensor();
    used.insert(name);
    return checkpoint->load(name);
  };
  std::function<bool(const std::string&)> keep;
  if (options.keep_parameter) {
    if (quant) throw ValueError("load: a sharded load (ZeRO-3) cannot quantize to 4-bit");
    keep = options.keep_parameter(*model);
  }
  // The file's name for a parameter the model needs, checked to be there.
  auto require = [&](const std::string& file_name, const Tensor& meta) {
    if (!checkpoint->contains(file_name)) {
      throw ValueError(str_cat(checkpoint->path(), ": tensor '", file_name,
                               "' is missing (the model needs it with shape ", meta.shape(), ")"));
    }
    used.insert(file_name);
  };
  std::function<bool(const std::string&)> pooled;
  if (options.in_host_pool) pooled = options.in_host_pool(*model);
  Generator generator(seed);
  model->materialize_parameters([&](const std::string& name, const Tensor& meta) -> Tensor {
    const auto target = targets.find(name);
    std::optional<HostPoolScope> pool;
    if (pooled && pooled(name)) pool.emplace(compute, host_pool(compute, options.pin_memory));
    const Device device = pool ? host_pool_device(compute) : compute;
    const std::string file_name = stored(name);
    if (keep && !keep(name)) {
      // Another rank's share: the generator passes it by a draw on the scratch meta device.
      const DType dtype = is_floating(meta.dtype()) ? options.dtype : meta.dtype();
      if (checkpoint) {
        require(file_name, meta);
      } else {
        model->init_parameter(name, Tensor::empty(meta.shape(), dtype, meta.device()), generator);
      }
      Tensor t = Tensor::empty(meta.shape(), dtype, device);
      t.storage()->release();
      return t;
    }
    if (target != targets.end() && checkpoint && prequantized &&
        is_quant_4bit_saved(*checkpoint, file_name)) {
      const std::string prefix = file_name.substr(0, file_name.size() - 6);  // "....weight"
      target->second->set_weight_4bit(
          quant_4bit_from_state_dict(prefix, load, checkpoint->path(), device),
          quant->compute_dtype);
      return Tensor();
    }
    const bool floating = is_floating(meta.dtype());
    const DType dtype = frozen.count(name) && target == targets.end() ? *options.frozen_linear_dtype
                                                                      : options.dtype;
    Tensor t = Tensor::empty(meta.shape(), floating ? dtype : meta.dtype(), device);
    if (checkpoint) {
      require(file_name, meta);
      checkpoint->copy_into(file_name, t);
    } else {
      // HF's init draws in fp32 and the model is then cast; every device's draw kernel computes
      // the fp32 sample and rounds it into the destination's dtype, so drawing straight into t
      // gives the same bits without an fp32 copy of the tensor (Note [Drawing in the target
      // dtype]).
      model->init_parameter(name, t, generator);
    }
    if (target == targets.end()) return t;
    // The layer's weight in options.dtype, quantized at once; only its 4-bit form stays.
    Linear& layer = *target->second;
    const Tensor w = layer.layout() == WeightLayout::in_out ? t.transpose(0, 1).contiguous() : t;
    Quant4bitConfig config = *quant;
    layer.set_weight_4bit(quantize_4bit(w, config), config.compute_dtype);
    return Tensor();
  });
  if (checkpoint) {
    static const std::regex gpt2_buffer(R"((transformer\.)?h\.\d+\.attn\.(bias|masked_bias))");
    std::set<std::string> tied;
    for (const std::string& name : model->tied_parameter_names()) tied.insert(stored(name));
    for (const std::string& name : checkpoint->names()) {
      if (used.count(name) || tied.count(name)) continue;
      if (gpt2 && std::regex_match(name, gpt2_buffer)) continue;
      throw ValueError(str_cat(checkpoint->path(), ": unexpected tensor '", name,
                               "' (the model has no parameter of that name)"));
    }
  }
  return model;
}

}  // namespace

std::unique_ptr<CausalLM> load_pretrained(const std::string& dir, Device device, uint64_t seed,
                                          const LoadOptions& options) {
  const std::filesystem::path path(dir);
  const std::filesystem::path config_path = path / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw ValueError(str_cat(dir, ": no config.json in the model directory"));
  }
  check_load_dtype(dir, options.dtype);
  std::optional<Quant4bitConfig> quant = read_quantization_config(config_path.string());
  const bool prequantized = quant.has_value();
  if (!quant) quant = options.load_in_4bit;
  if (quant) {
    check_quant_4bit_config(*quant, str_cat(config_path.string(), ": quantization_config"));
  }
  std::optional<SafetensorsCheckpoint> checkpoint;
  if (has_weights(path)) checkpoint.emplace(dir);
  return materialize_causal_lm(read_hf_config(config_path.string()),
                               checkpoint ? &*checkpoint : nullptr, quant, prequantized, device,
                               seed, options);
}

std::unique_ptr<CausalLM> make_causal_lm_as(const HfConfig& config, Device device, uint64_t seed,
                                            const LoadOptions& options) {
  check_load_dtype("model", options.dtype);
  if (options.load_in_4bit) check_quant_4bit_config(*options.load_in_4bit, "load_in_4bit");
  return materialize_causal_lm(config, nullptr, options.load_in_4bit, false, device, seed, options);
}

std::optional<Quant4bitConfig> read_quantization_config(const std::string& config_path) {
  const nlohmann::json config = parse_json(read_text_file(config_path), config_path);
  if (!config.is_object() || !config.contains("quantization_config")) return std::nullopt;
  const nlohmann::json& q = config.at("quantization_config");
  const std::string where = config_path + ": quantization_config";
  if (!q.is_object()) throw ValueError(str_cat(where, " is ", describe_json(q), ", not an object"));
  auto flag = [&](const char* key) {
    if (!q.contains(key) || q.at(key).is_null()) return false;
    if (!q.at(key).is_boolean()) {
      throw ValueError(str_cat(where, ".", key, " is ", describe_json(q.at(key)), ", not a bool"));
    }
    return q.at(key).get<bool>();
  };
  auto text = [&](const char* key, const char* fallback) {
    if (!q.contains(key) || q.at(key).is_null()) return std::string(fallback);
    if (!q.at(key).is_string()) {
      throw ValueError(
          str_cat(where, ".", key, " is ", describe_json(q.at(key)), ", not a string"));
    }
    return q.at(key).get<std::string>();
  };
  if (q.contains("quant_method") && text("quant_method", "") != "bitsandbytes") {
    throw ValueError(str_cat(where, ".quant_method is '", text("quant_method", ""),
                             "'; headroom reads bitsandbytes 4-bit models only"));
  }
  if (flag("load_in_8bit") || flag("_load_in_8bit")) {
    throw ValueError(str_cat(where, ".load_in_8bit is true; headroom loads 4-bit models only"));
  }
  if (!flag("load_in_4bit") && !flag("_load_in_4bit")) return std::nullopt;
  Quant4bitConfig c;
  c.quant_type =
      parse_quant_4bit_type(text("bnb_4bit_quant_type", "fp4"), where + ".bnb_4bit_quant_type");
  c.double_quant = flag("bnb_4bit_use_double_quant");
  auto dtype = [&](const char* key, const char* fallback) {
    try {
      return dtype_from_name(text(key, fallback));
    } catch (const ValueError& e) {
      throw ValueError(str_cat(where, ".", key, ": ", e.what()));
    }
  };
  c.compute_dtype = dtype("bnb_4bit_compute_dtype", "float32");
  c.quant_storage = dtype("bnb_4bit_quant_storage", "uint8");
  check_quant_4bit_config(c, where);
  return c;
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
                               "' is missing (the model needs it with shape ", param.shape(), ")"));
    }
    used.insert(stored);
    // Another rank's ZeRO-3 share (its memory released here): its owner reads it.
    if (!param.storage()->materialized()) continue;
    checkpoint.copy_into(stored, param);
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
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  write_hf_config(config_path, model.config());
  std::vector<std::pair<std::string, Tensor>> tensors = model.named_parameters();
  const std::vector<std::pair<std::string, Tensor>> buffers = model.named_buffers();
  if (!buffers.empty()) {
    // A 4-bit model: transformers reads its quantization_config from config.json.
    const Linear* layer = nullptr;
    for (auto& [name, module] : const_cast<CausalLM&>(model).named_modules()) {
      const auto* l = dynamic_cast<const Linear*>(module);
      if (l && is_linear_4bit(*l)) {
        layer = l;
        break;
      }
    }
    nlohmann::json config = parse_json(read_text_file(config_path), config_path);
    const Quant4bitWeight& w = *layer->weight_4bit();
    config["quantization_config"] = {
        {"_load_in_4bit", true},
        {"_load_in_8bit", false},
        {"bnb_4bit_compute_dtype", dtype_traits(layer->compute_dtype()).torch_name},
        {"bnb_4bit_quant_storage", dtype_traits(w.packed.dtype()).torch_name},
        {"bnb_4bit_quant_type", quant_4bit_type_name(w.quant_type)},
        {"bnb_4bit_use_double_quant", w.nested},
        {"llm_int8_enable_fp32_cpu_offload", false},
        {"llm_int8_has_fp16_weight", false},
        {"llm_int8_skip_modules", nullptr},
        {"llm_int8_threshold", 6.0},
        {"load_in_4bit", true},
        {"load_in_8bit", false},
        {"quant_method", "bitsandbytes"}};
    write_file_atomically(config_path, config.dump(2) + "\n");
    tensors.insert(tensors.end(), buffers.begin(), buffers.end());
  }
  // HF refuses safetensors files whose metadata does not say which framework wrote them.
  save_safetensors_checkpoint(dir, tensors, max_shard_bytes, {{"format", "pt"}});
}

}  // namespace headroom
