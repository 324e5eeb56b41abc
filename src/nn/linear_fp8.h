// FP8 training on the model side: which projection layers compute in FP8 (TE's te.Linear in place
// of torch.nn.Linear, lm_head left in full precision as TE's examples and accelerate do).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "quant/fp8_linear.h"

namespace headroom {

// Gives every full-precision Linear below `root` whose dotted name is not in `skip_modules`
// (names or final components, as load_in_4bit's) an FP8 state from `fp8` on `state_device` (the
// layer's device when not given), so that its forward runs fp8_linear. The state stays where it
// is made: a model whose blocks wait in the host pool (parameter offload) passes the compute
// device. By default lm_head and LoRA's adapters (lora_A, lora_B) stay in the recipe's
// precision: a frozen base computes in FP8 under its adapters. Returns the names converted.
std::vector<std::string> enable_fp8_linears(Module& root, Fp8Training& fp8,
                                            std::optional<Device> state_device = std::nullopt,
                                            const std::vector<std::string>& skip_modules = {
                                                "lm_head", "lora_A", "lora_B"});

}  // namespace headroom
