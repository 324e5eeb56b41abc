// Text sampling for the sample printed after training: greedy or top-k with temperature, one
// token at a time through the model's logits (no KV cache: the samples are short).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "nn/causal_lm.h"

namespace headroom {

struct GenerationOptions {
  int64_t max_new_tokens = 200;
  double temperature = 0.8;  // 0: greedy (the most likely token)
  int64_t top_k = 40;        // sample among the k most likely tokens; 0: all of them
  uint64_t seed = 42;        // of the Philox stream the samples draw from
  std::optional<DType> autocast_dtype = std::nullopt;  // run the forward passes under autocast
  std::function<bool()> stop = nullptr;  // asked before each new token: true ends it there
};

// `prompt` (non-empty) followed by up to max_new_tokens generated ids. The model sees at most its
// context length of trailing tokens. Runs in eval mode under no_grad and restores the mode.
// ValueError for an empty prompt or a negative temperature / top_k.
std::vector<int32_t> generate(CausalLM& model, const std::vector<int32_t>& prompt,
                              const GenerationOptions& options);

}  // namespace headroom
