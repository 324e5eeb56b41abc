// Turning a model's projections to FP8 (see linear_fp8.h).
#include "nn/linear_fp8.h"

#include "nn/linear_4bit.h"

namespace headroom {

std::vector<std::string> enable_fp8_linears(Module& root, Fp8Training& fp8,
                                            std::optional<Device> state_device,
                                            const std::vector<std::string>& skip_modules) {
  std::vector<std::string> converted;
  for (auto& [name, module] : root.named_modules()) {
    auto* layer = dynamic_cast<Linear*>(module);
    if (!layer || is_linear_4bit(*layer) || layer->fp8() || is_skipped_module(name, skip_modules)) {
      continue;
    }
    layer->set_fp8(fp8.new_layer(state_device.value_or(layer->device())));
    converted.push_back(name);
  }
  return converted;
}

}  // namespace headroom
