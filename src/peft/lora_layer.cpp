// LoraLayer: PEFT's initialisation and forward.
#include "peft/lora_layer.h"

#include <cmath>
#include <memory>

#include "core/grad_mode.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

namespace headroom {

namespace {

// nn.Linear's reset_parameters: kaiming_uniform_(a=√5) is U(-1/√fan_in, 1/√fan_in).
void kaiming_uniform(const Tensor& w, int64_t fan_in, Generator* generator) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  w.uniform_(-bound, bound, generator);
}

}  // namespace

LoraLayer::LoraLayer(int64_t in, int64_t out, const LoraConfig& config, Device device, DType dtype,
                     Generator* generator)
    : lora_A_(register_module(
          "lora_A", std::make_unique<Linear>(in, config.r, false, WeightLayout::out_in, device))),
      lora_B_(register_module(
          "lora_B", std::make_unique<Linear>(config.r, out, false, WeightLayout::out_in, device))),
      scaling_(config.scaling()),
      dropout_(config.lora_dropout) {
  NoGradGuard no_grad;
  switch (config.init_lora_weights) {
    case LoraInit::kaiming:
      kaiming_uniform(lora_A_.weight(), in, generator);
      lora_B_.weight().zero_();
      break;
    case LoraInit::gaussian:
      lora_A_.weight().normal_(0.0, 1.0 / static_cast<double>(config.r), generator);
      lora_B_.weight().zero_();
      break;
    case LoraInit::random:
      kaiming_uniform(lora_A_.weight(), in, generator);
      kaiming_uniform(lora_B_.weight(), config.r, generator);
      break;
  }
  if (dtype != DType::f32) to(dtype);
}

bool LoraLayer::reads_input_as_projection() const {
  return !(is_training() && dropout_ > 0.0) && lora_A_.input_dtype().has_value();
}

Tensor LoraLayer::forward(const Tensor& x, Tensor base) const {
  const Tensor in = is_training() && dropout_ > 0.0 ? dropout(x, dropout_, true) : x;
  const Tensor h = lora_A_.forward(in);
  if (lora_B_.fp8() || lora_B_.weight_4bit() || lora_B_.adapter() || lora_B_.bias().defined()) {
    const Tensor delta = lora_B_.forward(h);
    return add(base, scaling_ == 1.0 ? delta : scale(delta, scaling_));
  }
  return linear_add(std::move(base), h, lora_B_.weight(), scaling_);
}

}  // namespace headroom
