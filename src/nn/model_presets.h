// Named model shapes for `--model`: tiny byte-level models that train on two CPU cores, GPT-2's
// hub sizes and Meta's Llama configs (which the memory planner sizes without building them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nn/model_config.h"

namespace headroom {

// The preset names, in the order --help lists them.
std::vector<std::string> model_preset_names();

// The config of preset `name`, or nullopt when there is no such preset.
std::optional<HfConfig> find_model_preset(std::string_view name);

// The config of preset `name`; ValueError naming it and listing the presets otherwise.
HfConfig model_preset(std::string_view name);

// The model's context length: GPT-2's n_positions, Llama's max_position_embeddings.
int64_t context_length(const HfConfig& config);
// The longest sequence the model can compute at all: GPT-2's n_positions (a table of learned
// positions); none for the rotary families, whose positions are computed for any length
// (transformers runs them past max_position_embeddings, untrained as those positions are).
std::optional<int64_t> position_limit(const HfConfig& config);
// max_seq_length `t` checked against position_limit: ValueError naming the field, value and
// limit when it is below 1 or above it.
void check_max_seq_length(const HfConfig& config, int64_t t);
int64_t vocab_size(const HfConfig& config);

// The sizes the memory and FLOP formulas use (plan/), named alike for GPT-2 and Llama.
struct ModelDims {
  int64_t layers = 0;
  int64_t hidden = 0;    // the residual width
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // key / value heads (GPT-2: all of them)
  int64_t head_dim = 0;
  int64_t vocab = 0;
};
ModelDims model_dims(const HfConfig& config);

}  // namespace headroom
