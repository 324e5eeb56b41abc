// The `--model` argument made into a model and its tokenizer: a preset (byte-level tokenizer) or
// a Hugging Face model directory (config.json, weights if any, tokenizer files if any).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"
#include "io/pretrained.h"
#include "io/tokenizer.h"
#include "nn/causal_lm.h"

namespace headroom {

struct ModelAndTokenizer {
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// `model` names a preset (nn/model_presets.h), initialised as HF does from `seed`, or a
// directory: load_pretrained (its weights when it has any, else HF's initialisation from `seed`)
// and load_tokenizer; either made in options' dtype and 4-bit layers, one tensor at a time.
// ValueError naming the argument or path when it is neither, and when the tokenizer's
// vocabulary does not fit in the model's.
ModelAndTokenizer load_model_and_tokenizer(const std::string& model, Device device, uint64_t seed,
                                           const LoadOptions& options = {});

// The config `model` builds: the preset's, or the directory's config.json (ValueError as
// load_model_and_tokenizer's for neither).
HfConfig model_config_of(const std::string& model);

// TrainingArguments.device: "auto" is auto_device(), anything else is Device::parse's (an
// explicit "cuda" is taken as asked, and its ops then say that they have no kernel there).
Device resolve_device(const std::string& device);

// cuda:0 when a GPU is present and the CUDA backend computes the ops, else the CPU: a GPU whose
// backend has no op kernels yet is not chosen (Note [Devices that compute the ops]).
Device auto_device();

}  // namespace headroom
