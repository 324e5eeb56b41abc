// HF model directories: config.json plus model.safetensors (or shards with
// model.safetensors.index.json), read into and written from headroom's models.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/causal_lm.h"
#include "quant/quant_4bit.h"

namespace headroom {

class SafetensorsCheckpoint;

// How load_pretrained materializes a model (transformers' from_pretrained torch_dtype and
// quantization_config).
struct LoadOptions {
  DType dtype = DType::f32;  // the floating parameters' dtype (f32, bf16, f16)
  // Quantize every linear layer but skip_modules to 4-bit (BitsAndBytesConfig load_in_4bit);
  // a directory saved 4-bit (its config.json has a quantization_config) loads 4-bit anyway.
  std::optional<Quant4bitConfig> load_in_4bit;
  std::vector<std::string> skip_modules = {"lm_head"};  // llm_int8_skip_modules
  // LoRA under autocast (Note [A frozen base in the compute dtype]): the weights and biases of
  // the linear layers not in skip_modules nor in keep_modules are made in this dtype instead,
  // so a frozen fp32 copy of them never exists.
  std::optional<DType> frozen_linear_dtype;
  std::vector<std::string> keep_modules;  // modules trained in full (modules_to_save)
  // ZeRO-3's sharded load (DeepSpeed's zero.Init): given the model still on the meta device
  // (every parameter's name and shape known), returns which parameters this rank keeps. One it
  // does not keep gets its tensor with the memory released at once (Storage::release): it is
  // neither read from the files nor drawn, though the init's generator advances past it as
  // before, so the kept ones are those of a whole load. Not with load_in_4bit.
  std::function<std::function<bool(const std::string& name)>(const CausalLM& meta)> keep_parameter;
  // Parameter offload's load: given the model on the meta device, which parameters are made in
  // `device`'s host pool (memory/host_pool.h, pinned with pin_memory) instead of on `device`:
  // the blocks', whose home is the pool, so that they are never all on the device at once (a
  // 4-bit layer's weight is quantized there).
  std::function<std::function<bool(const std::string& name)>(const CausalLM& meta)> in_host_pool;
  bool pin_memory = true;
};

// Builds the model config.json describes; loads its weights when the directory has any, else
// initialises as HF does (from `seed`). See Note [Materializing one tensor at a time]: the
// model is built on the meta device and each parameter then made in options.dtype on `device`,
// read from the files straight into that dtype (or drawn by HF's init and rounded), a 4-bit
// layer's weight quantized as soon as it is read; no full-precision copy of the model exists.
std::unique_ptr<CausalLM> load_pretrained(const std::string& dir, Device device = kCPU,
                                          uint64_t seed = 0, const LoadOptions& options = {});

// The model `config` describes (a preset), made as load_pretrained makes a directory without
// weights: each parameter drawn by HF's init and rounded to options.dtype one at a time, the
// 4-bit layers quantized as they are made. make_causal_lm with f32 and no 4-bit gives the same.
std::unique_ptr<CausalLM> make_causal_lm_as(const HfConfig& config, Device device, uint64_t seed,
                                            const LoadOptions& options);

// The 4-bit settings of config.json's "quantization_config" (transformers' BitsAndBytesConfig:
// load_in_4bit, bnb_4bit_quant_type, bnb_4bit_use_double_quant, bnb_4bit_compute_dtype,
// bnb_4bit_quant_storage), or nullopt without one or with load_in_4bit false. ValueError naming
// the file and field for a value headroom cannot take (8-bit, an unknown type or dtype).
std::optional<Quant4bitConfig> read_quantization_config(const std::string& config_path);

// Copies every parameter from the checkpoint. Names are checked both ways: a parameter missing
// from the files or a tensor the model does not have is a ValueError naming file and tensor.
// Accepted as HF accepts them: GPT-2 files without the "transformer." prefix (the original
// openai-community/gpt2 upload), its causal-mask buffers (h.N.attn.bias / masked_bias), and a
// stored copy of a tied lm_head.weight. A parameter whose memory is released (another rank's
// ZeRO-3 share, Storage::release) is checked but not read.
void load_weights(CausalLM& model, const SafetensorsCheckpoint& checkpoint);

// Writes config.json and the weights (sharded above max_shard_bytes, HF's default 5 GB), each
// file atomically; tied parameters are not stored, as HF does. A model with 4-bit layers is
// saved as transformers + bitsandbytes save one: bitsandbytes' keys for each 4-bit weight and a
// quantization_config in config.json.
void save_pretrained(const CausalLM& model, const std::string& dir,
                     size_t max_shard_bytes = 5'000'000'000);

}  // namespace headroom
