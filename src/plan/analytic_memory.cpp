// The guides' formulas, term by term (Note [Formula memory]).
#include "plan/analytic_memory.h"

#include "memsave/checkpoint_policy.h"
#include "nn/model_presets.h"
#include "optim/optimizer_factory.h"

namespace headroom {

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

FormulaMemory formula_training_memory(const HfConfig& config, const TrainingConfig& run,
                                      const std::vector<Shape>& parameter_shapes,
                                      const std::vector<Shape>* trainable_shapes) {
  const TrainingArguments& args = run.args;
  const PrecisionRecipe& recipe = run.recipe;
  FormulaMemory f;
  const bool pure = recipe.precision == Precision::pure_bf16;
  const bool mixed = recipe.autocast_dtype.has_value();
  f.weight_bytes_per_parameter = pure ? 2.0 : mixed ? 6.0 : 4.0;
  f.gradient_bytes_per_parameter = run.updates_in_backward() ? 0.0 : pure ? 2.0 : 4.0;
  double n = 0.0, trained = 0.0, states = 0.0;
  for (const Shape& shape : parameter_shapes) n += static_cast<double>(shape.numel());
  for (const Shape& shape : trainable_shapes ? *trainable_shapes : parameter_shapes) {
    trained += static_cast<double>(shape.numel());
    for (const StateTensor& state :
         optimizer_state_layout(run.optimizer_arguments, shape, recipe.param_dtype)) {
      states += static_cast<double>(state.bytes());
    }
  }
  f.parameters = static_cast<int64_t>(n * f.weight_bytes_per_parameter);
  // Offloaded optimizers keep their share's gradients and states on the host (ZeRO-Offload).
  const OffloadSettings& offload = run.offload;
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
  const CheckpointPolicy policy = run.checkpointing.value_or(CheckpointPolicy{});
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

FormulaMemory formula_training_memory(const HfConfig& config, const TrainingArguments& args,
                                      const PrecisionRecipe& recipe,
                                      const std::vector<Shape>& parameter_shapes,
                                      const std::vector<Shape>* trainable_shapes) {
  TrainingArguments in_recipe = args;
  in_recipe.precision = recipe.name();
  return formula_training_memory(config, resolve_training_config(in_recipe), parameter_shapes,
                                 trainable_shapes);
}

}  // namespace headroom
