// Presets and model directories behind one `--model` argument.
#include "train/model_source.h"

#include <filesystem>
#include <optional>

#include "core/device_kernels.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "io/pretrained.h"
#include "nn/model_presets.h"

namespace headroom {

ModelAndTokenizer load_model_and_tokenizer(const std::string& model, Device device, uint64_t seed,
                                           const LoadOptions& options) {
  ModelAndTokenizer result;
  if (std::optional<HfConfig> preset = find_model_preset(model)) {
    const bool plain = options.dtype == DType::f32 && !options.load_in_4bit &&
                       !options.frozen_linear_dtype && !options.keep_parameter &&
                       !options.in_host_pool;
    result.model = plain ? make_causal_lm(*preset, device, seed)
                         : make_causal_lm_as(*preset, device, seed, options);
    result.tokenizer = std::make_unique<ByteTokenizer>();
  } else if (std::filesystem::is_directory(model)) {
    if (!std::filesystem::exists(std::filesystem::path(model) / "config.json")) {
      throw ValueError(str_cat("model: directory '", model, "' has no config.json"));
    }
    result.model = load_pretrained(model, device, seed, options);
    result.tokenizer = load_tokenizer(model);
  } else {
    std::string known;
    for (const std::string& name : model_preset_names())
      known += (known.empty() ? "" : ", ") + name;
    throw ValueError(
        str_cat("model: '", model, "' is neither a preset (", known, ") nor a model directory"));
  }
  const int64_t model_vocab = vocab_size(result.model->config());
  if (result.tokenizer->vocab_size() > model_vocab) {
    throw ValueError(str_cat("model '", model, "': the ", result.tokenizer->kind(),
                             " tokenizer has ", result.tokenizer->vocab_size(),
                             " tokens, more than the model's vocab_size ", model_vocab));
  }
  return result;
}

HfConfig model_config_of(const std::string& model) {
  if (std::optional<HfConfig> preset = find_model_preset(model)) return *preset;
  if (std::filesystem::is_regular_file(std::filesystem::path(model) / "config.json")) {
    return read_hf_config((std::filesystem::path(model) / "config.json").string());
  }
  // Refused as loading it would be.
  return load_model_and_tokenizer(model, kMeta, 0).model->config();
}

Device resolve_device(const std::string& device) {
  return device == "auto" ? auto_device() : Device::parse(device);
}

Device auto_device() {
  if (cuda_is_available() && device_has_op_kernels(DeviceType::cuda)) {
    return Device{DeviceType::cuda, 0};
  }
  return kCPU;
}

}  // namespace headroom
