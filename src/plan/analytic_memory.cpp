// The guides' formulas, term by term (Note [Formula memory]).
#include "plan/analytic_memory.h"

#include "memsave/checkpoint_policy.h"
#include "nn/model_presets.h"
#include "optim/optimizer_factory.h"
#include "train/trainer.h"

namespace headroom {

namespace {

// Bytes of optimizer state for one parameter tensor of `shape`.
double optimizer_state_bytes(const std::string& optim, const Shape& shape, bool bf16_states,
                             bool kahan, double sgd_momentum) {
  const auto n = static_cast<double>(shape.numel());
  if (optim == "adamw_torch" || optim == "adamw_torch_fused" || optim == "adamw_bf16") {
    const double state = (bf16_states || optim == "adamw_bf16") ? 4.0 : 8.0;
    return n * (state + (kahan ? 2.0 : 0.0));
  }
  if (optim == "adamw_8bit" || optim == "adamw_bnb_8bit") {
    if (shape.numel() < 4096) return n * 8.0;
    const double blocks = static_cast<double>((shape.numel() + 255) / 256);
    return n * 2.0 + blocks * 2.0 * 4.0;  // codes of m and v, an fp32 absmax per block of each
  }
  if (optim == "lion" || optim == "lion_32bit") return n * 4.0;
  if (optim == "sgd") return sgd_momentum != 0.0 ? n * 4.0 : 0.0;
  if (optim == "adafactor") {
    if (shape.ndim() < 2) return n * 4.0;
    const int64_t cols = shape[shape.ndim() - 1];
    const int64_t rows = shape.numel() / cols;
    return 4.0 * static_cast<double>(rows + cols);
  }
  return 0.0;  // lomo
}

}  // namespace

nlohmann::ordered_json FormulaMemory::to_json() const {
  return {{"parameters", parameters},
          {"gradients", gradients},
          {"optimizer_states", optimizer_states},
          {"activations", activations},
          {"total", total()},
          {"weight_bytes_per_parameter", weight_bytes_per_parameter},
          {"gradient_bytes_per_parameter", gradient_bytes_per_parameter},
          {"optimizer_bytes_per_parameter", optimizer_bytes_per_parameter}};
}

FormulaMemory formula_training_memory(const HfConfig& config, const TrainingArguments& args,
                                      const PrecisionRecipe& recipe,
                                      const std::vector<Shape>& parameter_shapes,
                                      const std::vector<Shape>* trainable_shapes) {
  FormulaMemory f;
  const bool pure = recipe.precision == Precision::pure_bf16;
  const bool mixed = recipe.autocast_dtype.has_value();
  const bool lomo = args.optim == "lomo";
  f.weight_bytes_per_parameter = pure ? 2.0 : mixed ? 6.0 : 4.0;
  f.gradient_bytes_per_parameter = lomo ? 0.0 : pure ? 2.0 : 4.0;
  double sgd_momentum = 0.0;
  if (args.optim == "sgd") {
    const auto extras = parse_optim_args(args.optim_args);
    if (auto it = extras.find("momentum"); it != extras.end()) sgd_momentum = std::stod(it->second);
  }
  double n = 0.0, trained = 0.0, states = 0.0;
  for (const Shape& shape : parameter_shapes) n += static_cast<double>(shape.numel());
  for (const Shape& shape : trainable_shapes ? *trainable_shapes : parameter_shapes) {
    trained += static_cast<double>(shape.numel());
    states += optimizer_state_bytes(args.optim, shape, recipe.optimizer_state_dtype == DType::bf16,
                                    recipe.kahan_summation, sgd_momentum);
  }
  f.parameters = static_cast<int64_t>(n * f.weight_bytes_per_parameter);
  // Offloaded optimizers keep their share's gradients and states on the host (ZeRO-Offload).
  const OffloadSettings offload = training_offload(args);
  const double on_device = offload.optimizer ? 1.0 - offload.optimizer_ratio : 1.0;
  f.gradients = static_cast<int64_t>(trained * f.gradient_bytes_per_parameter * on_device);
  f.optimizer_states = static_cast<int64_t>(states * on_device);
  f.optimizer_bytes_per_parameter = trained > 0.0 ? states / trained : 0.0;

  const ModelDims m = model_dims(config);
  const auto s = static_cast<double>(args.max_seq_length.value_or(context_length(config)));
  const auto b = static_cast<double>(args.per_device_train_batch_size);
  const auto h = static_cast<double>(m.hidden);
  const auto a = static_cast<double>(m.heads);
  const double scale = mixed || pure ? 1.0 : 2.0;  // the paper counts 16-bit activations
  const double none = s * b * h * (34.0 + 5.0 * a * s / h);
  CheckpointPolicy policy;
  if (args.gradient_checkpointing) policy = parse_checkpoint_policy(args.gradient_checkpointing_policy);
  double layers = 0.0;
  for (int64_t l = 0; l < m.layers; ++l) {
    if (!policy.checkpoints_block(l)) {
      layers += none;
    } else if (policy.kind == CheckpointPolicy::Kind::selective) {
      layers += s * b * h * 34.0;
    } else {
      layers += 2.0 * s * b * h;
    }
  }
  const double logits = 4.0 * s * b * static_cast<double>(m.vocab);
  f.activations = static_cast<int64_t>(layers * scale + logits);
  return f;
}

}  // namespace headroom
