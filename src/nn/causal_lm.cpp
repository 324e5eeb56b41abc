// The model factory, and the innermost block wrapper.
#include "nn/causal_lm.h"

#include <memory>

#include "core/error.h"
#include "memory/alloc_config.h"
#include "memory/caching_allocator.h"
#include "memory/device_memory.h"
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

namespace {

// Note [A model's structure takes host memory]
// Each block's modules, tensors and their bookkeeping live in host memory whatever the device,
// the meta device of a plan included: about 84 KiB a block of llama-tiny, measured (RSS of
// `headroom plan` at 1,000 and 4,000 layers). A config of 1e9 layers never returned, growing
// until the host ran out; refused here when even 32 KiB a block exceeds the host's available
// memory.
constexpr int64_t kMinHostBytesPerBlock = int64_t{32} << 10;

void check_blocks_fit_the_host(const char* field, int64_t blocks) {
  const size_t available = caching_allocator(kCPU).device_memory_info().free;
  if (available == 0 || blocks <= static_cast<int64_t>(available) / kMinHostBytesPerBlock) return;
  throw ValueError(str_cat(field, ": ", blocks, " blocks, whose modules alone take at least ",
                           format_bytes(static_cast<size_t>(blocks) * kMinHostBytesPerBlock),
                           " of host memory (32 KiB a block), more than the ",
                           format_bytes(available), " available"));
}

}  // namespace

std::unique_ptr<CausalLM> make_causal_lm(const HfConfig& config, Device device, uint64_t seed) {
  if (const auto* gpt2 = std::get_if<GPT2Config>(&config)) {
    check_blocks_fit_the_host("n_layer", gpt2->n_layer);
    return std::make_unique<GPT2LMHeadModel>(*gpt2, device, seed);
  }
  const LlamaConfig& llama = std::get<LlamaConfig>(config);
  check_blocks_fit_the_host("num_hidden_layers", llama.num_hidden_layers);
  return std::make_unique<LlamaForCausalLM>(llama, device, seed);
}

}  // namespace headroom
