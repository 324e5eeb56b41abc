// The model factory, and the innermost block wrapper.
#include "nn/causal_lm.h"

#include <memory>

#include "nn/gpt2.h"
#include "nn/llama.h"

namespace headroom {

void wrap_block_forwards(CausalLM& model, BlockRunner run) {
  BlockRunners runners = model.block_runners();
  const BlockRunner inner = runners.block;
  // Shared: a checkpoint keeps the wrapped forward for its recompute, past this call.
  auto shared = std::make_shared<const BlockRunner>(std::move(run));
  runners.block = [shared, inner](int64_t layer, const LayerForward& forward, const Tensor& x) {
    const LayerForward wrapped = [shared, layer, forward](const Tensor& in) {
      return (*shared)(layer, forward, in);
    };
    return inner ? inner(layer, wrapped, x) : wrapped(x);
  };
  model.set_block_runners(std::move(runners));
}

std::unique_ptr<CausalLM> make_causal_lm(const HfConfig& config, Device device, uint64_t seed) {
  if (const auto* gpt2 = std::get_if<GPT2Config>(&config)) {
    return std::make_unique<GPT2LMHeadModel>(*gpt2, device, seed);
  }
  return std::make_unique<LlamaForCausalLM>(std::get<LlamaConfig>(config), device, seed);
}

}  // namespace headroom
