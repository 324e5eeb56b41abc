// HF model directories: config.json plus model.safetensors (or shards with
// model.safetensors.index.json), read into and written from headroom's models.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "nn/causal_lm.h"

namespace headroom {

class SafetensorsCheckpoint;

// Builds the model config.json describes; loads its weights when the directory has any, else
// initialises as HF does (from `seed`).
std::unique_ptr<CausalLM> load_pretrained(const std::string& dir, Device device = kCPU,
                                          uint64_t seed = 0);

// Copies every parameter from the checkpoint. Names are checked both ways: a parameter missing
// from the files or a tensor the model does not have is a ValueError naming file and tensor.
// Accepted as HF accepts them: GPT-2 files without the "transformer." prefix (the original
// openai-community/gpt2 upload), its causal-mask buffers (h.N.attn.bias / masked_bias), and a
// stored copy of a tied lm_head.weight.
void load_weights(CausalLM& model, const SafetensorsCheckpoint& checkpoint);

// Writes config.json and the weights (sharded above max_shard_bytes, HF's default 5 GB), each
// file atomically; tied parameters are not stored, as HF does.
void save_pretrained(const CausalLM& model, const std::string& dir,
                     size_t max_shard_bytes = 5'000'000'000);

}  // namespace headroom
