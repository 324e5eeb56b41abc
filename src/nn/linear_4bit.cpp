// Converting a model's linear layers to frozen 4-bit ones (see linear_4bit.h).
#include "nn/linear_4bit.h"

#include "core/grad_mode.h"

namespace headroom {

Tensor linear_weight_as(const Linear& layer, DType dtype) {
  if (const Quant4bitWeight* q = layer.weight_4bit()) {
    const Tensor w = dequantize_4bit(*q, dtype);
    return layer.layout() == WeightLayout::in_out ? w.transpose(0, 1).contiguous() : w;
  }
  return layer.weight().detach().to(dtype);
}

Quant4bitWeight quantize_linear_weight(const Linear& layer, const Quant4bitConfig& config) {
  NoGradGuard no_grad;
  const Tensor w = layer.weight().detach();
  return quantize_4bit(layer.layout() == WeightLayout::in_out ? w.transpose(0, 1).contiguous() : w,
                       config);
}

bool is_skipped_module(const std::string& name, const std::vector<std::string>& skip_modules) {
  for (const std::string& skip : skip_modules) {
    if (name == skip) return true;
    if (name.size() > skip.size() &&
        name.compare(name.size() - skip.size(), skip.size(), skip) == 0 &&
        name[name.size() - skip.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

std::vector<std::string> convert_linears_to_4bit(Module& root, const Quant4bitConfig& config,
                                                 const std::vector<std::string>& skip_modules) {
  check_quant_4bit_config(config, "load_in_4bit");
  std::vector<std::string> converted;
  for (auto& [name, module] : root.named_modules()) {
    auto* layer = dynamic_cast<Linear*>(module);
    if (!layer || is_linear_4bit(*layer) || is_skipped_module(name, skip_modules)) continue;
    layer->set_weight_4bit(quantize_linear_weight(*layer, config), config.compute_dtype);
    converted.push_back(name);
  }
  return converted;
}

int64_t dequantize_linears(Module& root, DType dtype) {
  NoGradGuard no_grad;
  int64_t count = 0;
  for (auto& [name, module] : root.named_modules()) {
    auto* layer = dynamic_cast<Linear*>(module);
    if (!layer || !is_linear_4bit(*layer)) continue;
    layer->set_weight(linear_weight_as(*layer, dtype));
    ++count;
  }
  return count;
}

std::vector<const Quant4bitWeight*> weights_4bit(Module& root) {
  std::vector<const Quant4bitWeight*> weights;
  for (auto& [name, module] : root.named_modules()) {
    const auto* linear = dynamic_cast<const Linear*>(module);
    if (linear && linear->weight_4bit()) weights.push_back(linear->weight_4bit());
  }
  return weights;
}

}  // namespace headroom
