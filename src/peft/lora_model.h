// A causal LM with LoRA adapters (PEFT's get_peft_model / PeftModel.from_pretrained /
// merge_and_unload): injection into the projections a LoraConfig names, the frozen base, the
// adapter's files (adapter_model.safetensors + adapter_config.json) and merging.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/causal_lm.h"
#include "peft/lora_config.h"

namespace headroom {

class Generator;
class SafetensorsCheckpoint;

// The name of an adapter's files in a directory, as PEFT writes them.
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";
inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
// PeftModel's prefix of every key in adapter_model.safetensors.
inline constexpr const char* kAdapterKeyPrefix = "base_model.model.";

// get_peft_model: checks `config`, freezes every parameter of `model`, wraps each projection the
// targets name (any AdaptableLinear: nn's Linear, or a 4-bit base) with a LoraLayer in the
// layer's compute_dtype (drawn from `generator`, the default one when null), and makes trainable
// the biases config.bias asks for and the parameters of modules_to_save. A target or module_to_save
// matching nothing is a ValueError naming the field, the value and the layers the model has.
// Returns the paths of the wrapped layers. `adapter_dtype`, when given, is the adapters' dtype
// instead of each layer's compute dtype (fp32 adapters on a base stored in bf16, as PEFT's under
// autocast).
std::vector<std::string> apply_lora(CausalLM& model, const LoraConfig& config,
                                    Generator* generator = nullptr,
                                    std::optional<DType> adapter_dtype = std::nullopt);

// Note [A frozen base in the compute dtype]
// Under autocast every projection's fp32 weight is cast to the compute dtype (bf16 / fp16), kept
// in the region's cast cache; a frozen weight never changes, so storing it cast once gives the
// same operands bit for bit, and saves the fp32 copy (2 bytes per base parameter net) and the
// cache's copies. PEFT users get the same by loading the base in bf16 (torch_dtype). Embeddings,
// norms and lm_head keep their dtype: autocast runs them in fp32, so casting them would change
// the numbers (prepare_model_for_kbit_training's upcast is the opposite mistake, bitsandbytes
// issue 1569). Layers with a trained bias (bias "all" / "lora_only") are left as they are.
// The Trainer makes these weights in the compute dtype as it loads them
// (LoadOptions::frozen_linear_dtype), so no fp32 copy exists even at load; this function then
// finds nothing left to cast. Returns the bytes the cast saved.
int64_t store_frozen_projections(CausalLM& model, DType compute_dtype);

// What an adapter saves: the trainable parameters (LoRA's A and B, trained biases,
// modules_to_save), under the model's names.
std::vector<std::pair<std::string, Tensor>> lora_state_dict(const CausalLM& model);

// The tensors of adapter_model.safetensors by their keys: base_model.model.<name>, where the
// parameters of a wrapped layer itself (a bias trained with bias "all" / "lora_only") are
// <layer>.base_layer.<param>, as PEFT's wrapper names them.
std::vector<std::pair<std::string, Tensor>> lora_file_tensors(const CausalLM& model);

// Writes `dir`/adapter_model.safetensors (keys base_model.model.<name>, metadata format pt) and
// adapter_config.json, each atomically.
void save_lora_adapter(const CausalLM& model, const LoraConfig& config, const std::string& dir);

// PeftModel.from_pretrained: reads `dir`'s adapter_config.json, applies it to `model` and copies
// the adapter's tensors in. A missing file, a tensor the model lacks or does not hold, a shape
// that differs: ValueError naming the file, the tensor (or field) and the value.
// `adapter_dtype`: the adapters' dtype (unset: each layer's compute dtype, as apply_lora).
LoraConfig load_lora_adapter(CausalLM& model, const std::string& dir,
                             std::optional<DType> adapter_dtype = std::nullopt);

// Copies an adapter's tensors (keys base_model.model.<name>) into `model`'s trainable parameters,
// which must match them one to one (a Trainer checkpoint's resume uses it too). A parameter
// whose memory is released (another rank's ZeRO-3 share) is checked but not read.
void load_lora_weights(CausalLM& model, const SafetensorsCheckpoint& weights);

// merge_and_unload: W += (B @ A)·scaling (transposed for GPT-2's [in, out] weights) in every
// wrapped layer, then the adapters are removed, leaving a plain model. Returns the merged count.
// NotImplementedError for an adapter on a base that is not a full-precision Linear (4-bit:
// dequantize_linears first).
int64_t merge_lora(CausalLM& model);

}  // namespace headroom
