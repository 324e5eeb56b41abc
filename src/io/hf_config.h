// Hugging Face config.json for the model families headroom builds: transformers' GPT2Config and
// LlamaConfig fields with their defaults, read and validated, and written back for from_pretrained.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "nn/model_config.h"

namespace headroom {

// GPT2Config, LlamaConfig and HfConfig live in nn/model_config.h, with the models that own them.

// Reads config.json (or `path`/config.json when `path` is a directory) and dispatches on its
// model_type: "gpt2" or "llama"; anything else is a ValueError naming the file, the field and
// the value. Missing fields take HF's defaults and unknown fields are ignored (HF configs carry
// many). A field of the wrong JSON type, a non-positive size, n_embd not divisible by n_head or
// num_attention_heads by num_key_value_heads is a ValueError naming the file, field, value and
// limit; an activation or rope_scaling headroom does not implement is a NotImplementedError.
HfConfig read_hf_config(const std::string& path);
// The same from text; `source_name` stands for the file in messages.
HfConfig parse_hf_config(const std::string& json_text, const std::string& source_name);

// config.json text as save_pretrained writes it (sorted keys, indent 2, a final newline), with
// model_type, architectures (GPT2LMHeadModel / LlamaForCausalLM), torch_dtype and every field;
// unset optionals are null, except head_dim, which is left out (older transformers would keep
// a null one). rope_scaling is written as null.
std::string to_json(const HfConfig& config);
// Writes to_json(config) atomically to `path` (or `path`/config.json when it is a directory).
void write_hf_config(const std::string& path, const HfConfig& config);

}  // namespace headroom
