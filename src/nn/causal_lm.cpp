// The model factory.
#include "nn/causal_lm.h"

#include "nn/gpt2.h"
#include "nn/llama.h"

namespace headroom {

std::unique_ptr<CausalLM> make_causal_lm(const HfConfig& config, Device device, uint64_t seed) {
  if (const auto* gpt2 = std::get_if<GPT2Config>(&config)) {
    return std::make_unique<GPT2LMHeadModel>(*gpt2, device, seed);
  }
  return std::make_unique<LlamaForCausalLM>(std::get<LlamaConfig>(config), device, seed);
}

}  // namespace headroom
