// The formulas the memory guides use, computed for a configuration so `headroom plan` can print
// them beside the dry run: bytes per parameter per recipe and optimizer (the HF docs' table),
// and Korthikanti et al.'s activation formula. They are the comparison, not the prediction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/precision.h"
#include "core/shape.h"
#include "nn/model_config.h"
#include "train/training_arguments.h"
#include "train/training_config.h"

namespace headroom {

// Note [Formula memory]
// parameters: N x bytes per weight as the guides count them: 4 (fp32), 6 for mixed precision
//   (fp32 master + 16-bit copy, the HF docs' "6 bytes"), 2 for pure bf16.
// gradients: N x 4 (2 in pure bf16); 0 for LOMO, which never holds the gradients.
// optimizer_states: AdamW 8 B/param (4 with bf16 states, +2 for pure bf16's Kahan buffer),
//   8-bit AdamW 2 (+ one fp32 absmax per block of 256; tensors under 4096 elements 8),
//   Lion 4, SGD 4 with momentum (else 0), Adafactor 4 x (rows + cols) per matrix and 4 per
//   vector element, LOMO 0.
// activations: Korthikanti et al. (2022), per layer s*b*h*(34 + 5*a*s/h) bytes of 16-bit
//   activations without recomputation, s*b*h*34 with selective recomputation, 2*s*b*h with full
//   (only the layer's input kept); doubled for fp32 activations; plus 4*s*b*v for the fp32 logits
//   of the output layer and loss. Layers checkpointed by every_N count as full, the others as
//   none.
// With optimizer offload the offloaded share's gradients and states are on the host: the device
//   counts the rest (1 - offload_optimizer_ratio) of both.
// The formula has no temporaries and no allocator slack: its total is what it claims to need.
struct FormulaMemory {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_states = 0;
  int64_t activations = 0;
  double weight_bytes_per_parameter = 0.0;
  double gradient_bytes_per_parameter = 0.0;
  double optimizer_bytes_per_parameter = 0.0;  // the optimizer's state over N

  int64_t total() const { return parameters + gradients + optimizer_states + activations; }
  // {"parameters", "gradients", "optimizer_states", "activations", "total"} in bytes, and the
  // bytes per parameter.
  nlohmann::ordered_json to_json() const;
};

// The formula figures of training `config` as `run` resolves it (the optimizer and its
// states, per_device_train_batch_size, max_seq_length (unset: the context), checkpointing,
// offload, the recipe), over the model's parameter shapes (unique tensors: tied weights once).
// The optimizer's states are those its state_layout() describes. trainable_shapes (LoRA: the
// adapters): gradients and optimizer states are counted over those only; null: over every
// parameter.
FormulaMemory formula_training_memory(const HfConfig& config, const TrainingConfig& run,
                                      const std::vector<Shape>& parameter_shapes,
                                      const std::vector<Shape>* trainable_shapes = nullptr);
// The same for `args` in `recipe` (which replaces the precision options of `args`).
FormulaMemory formula_training_memory(const HfConfig& config, const TrainingArguments& args,
                                      const PrecisionRecipe& recipe,
                                      const std::vector<Shape>& parameter_shapes,
                                      const std::vector<Shape>* trainable_shapes = nullptr);

}  // namespace headroom
