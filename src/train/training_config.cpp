// resolve_training_config: TrainingArguments' strings typed once.
#include "train/training_config.h"

#include <cmath>

#include "core/error.h"
#include "memory/alloc_config.h"
#include "train/deepspeed_config.h"
#include "train/model_source.h"

namespace headroom {

namespace {

// The range checks of the numbers the Trainer reads straight from the arguments.
void check_numbers(const TrainingArguments& args) {
  auto at_least = [](const char* name, int64_t value, int64_t limit) {
    if (value < limit) throw ValueError(str_cat(name, ": ", value, " is below ", limit));
  };
  at_least("per_device_train_batch_size", args.per_device_train_batch_size, 1);
  at_least("per_device_eval_batch_size", args.per_device_eval_batch_size, 1);
  if (!(args.ddp_bucket_cap_mb * (1 << 20) >= 1.0)) {
    throw ValueError(str_cat("ddp_bucket_cap_mb: ", args.ddp_bucket_cap_mb, " is below one byte"));
  }
  at_least("gradient_accumulation_steps", args.gradient_accumulation_steps, 1);
  at_least("logging_steps", args.logging_steps, 1);
  if (args.max_steps <= 0 && !(args.num_train_epochs > 0.0)) {
    throw ValueError(str_cat("num_train_epochs: ", args.num_train_epochs,
                             " must be > 0 when max_steps (", args.max_steps, ") is not set"));
  }
  if (args.eval_steps) at_least("eval_steps", *args.eval_steps, 1);
  if (args.max_eval_samples) at_least("max_eval_samples", *args.max_eval_samples, 1);
  if (!(std::isfinite(args.eval_loss_target) && args.eval_loss_target >= 0.0)) {
    throw ValueError(str_cat("eval_loss_target: ", args.eval_loss_target,
                             " is not a finite loss of 0 (none) or more"));
  }
  if (args.max_grad_norm < 0.0) {
    throw ValueError(str_cat("max_grad_norm: ", args.max_grad_norm, " is below 0"));
  }
  if (!(args.neftune_noise_alpha >= 0.0)) {
    throw ValueError(str_cat("neftune_noise_alpha: ", args.neftune_noise_alpha, " is below 0"));
  }
}

}  // namespace

PackingStrategy training_packing_strategy(const TrainingArguments& args) {
  if (args.packing_strategy == "bfd") return PackingStrategy::bfd;
  if (args.packing_strategy == "wrapped") return PackingStrategy::wrapped;
  // TRL 1.x still takes bfd_split's old name, with a deprecation warning.
  if (args.packing_strategy == "bfd_split" || args.packing_strategy == "bfd-requeue") {
    return PackingStrategy::bfd_split;
  }
  throw ValueError(str_cat("packing_strategy: unknown value '", args.packing_strategy,
                           "' (expected one of bfd, bfd_split, wrapped)"));
}

namespace {

IntervalStrategy parse_interval_strategy(const std::string& value, const char* field) {
  if (value == "no") return IntervalStrategy::no;
  if (value == "steps") return IntervalStrategy::steps;
  throw ValueError(str_cat(field, ": unknown value '", value, "' (expected one of no, steps)"));
}

// dtype_from_name with the option's name in front of its error.
DType named_dtype(const std::string& name, const char* field) {
  try {
    return dtype_from_name(name);
  } catch (const ValueError& e) {
    throw ValueError(str_cat(field, ": ", e.what()));
  }
}

}  // namespace

int64_t training_zero_stage(const TrainingArguments& args) {
  std::optional<int64_t> stage = args.zero_stage;
  if (!args.deepspeed.empty()) {
    // No zero_optimization section (or no stage in it): stage 0, as DeepSpeed.
    const int64_t from_file = read_deepspeed_config(args.deepspeed).zero_stage.value_or(0);
    if (stage && *stage != from_file) {
      throw ValueError(str_cat("zero_stage: ", *stage, " differs from ", args.deepspeed,
                               "'s zero_optimization.stage ", from_file));
    }
    stage = from_file;
  }
  const int64_t value = stage.value_or(0);
  if (value < 0 || value > 3) throw ValueError(str_cat("zero_stage: ", value, " is not 0..3"));
  return value;
}

OffloadSettings training_offload(const TrainingArguments& args) {
  OffloadSettings out;
  out.optimizer = args.offload_optimizer;
  out.optimizer_ratio = args.offload_optimizer_ratio;
  out.activations = args.offload_activations;
  out.params = args.offload_params;
  out.pin_memory = args.offload_pin_memory;
  if (!args.deepspeed.empty()) {
    const DeepSpeedConfig config = read_deepspeed_config(args.deepspeed);
    out.optimizer = out.optimizer || config.offload_optimizer.value_or(false);
    out.params = out.params || config.offload_param.value_or(false);
    if (config.offload_optimizer_ratio) {
      if (args.offload_optimizer_ratio != 1.0 &&
          args.offload_optimizer_ratio != *config.offload_optimizer_ratio) {
        throw ValueError(str_cat("offload_optimizer_ratio: ", args.offload_optimizer_ratio,
                                 " differs from ", args.deepspeed,
                                 "'s zero_optimization.offload_optimizer.ratio ",
                                 *config.offload_optimizer_ratio));
      }
      out.optimizer_ratio = *config.offload_optimizer_ratio;
    }
    // One host pool: pinned unless a section that offloads says pin_memory false.
    if ((config.offload_optimizer.value_or(false) &&
         !config.offload_optimizer_pin_memory.value_or(true)) ||
        (config.offload_param.value_or(false) && !config.offload_param_pin_memory.value_or(true))) {
      out.pin_memory = false;
    }
  }
  if (!(out.optimizer_ratio >= 0.0 && out.optimizer_ratio <= 1.0)) {
    throw ValueError(
        str_cat("offload_optimizer_ratio: ", out.optimizer_ratio, " is not in [0, 1]"));
  }
  return out;
}

PrecisionRecipe training_precision(const TrainingArguments& args) {
  if (!args.precision.empty()) return parse_precision(args.precision);
  if (args.bf16 && args.fp16) throw ValueError("bf16 and fp16: both are set; choose one");
  if (args.bf16) return precision_recipe(Precision::bf16);
  if (args.fp16) return precision_recipe(Precision::fp16);
  return precision_recipe(Precision::fp32);
}

LoraConfig training_lora_config(const TrainingArguments& args) {
  LoraConfig config;
  config.r = args.lora_r;
  config.lora_alpha = args.lora_alpha;
  config.lora_dropout = args.lora_dropout;
  config.use_rslora = args.use_rslora;
  config.target_modules = split_module_names(args.lora_target_modules);
  config.modules_to_save = split_module_names(args.lora_modules_to_save);
  config.base_model_name_or_path = args.model;
  return config;
}

std::optional<Quant4bitConfig> training_quant_4bit_config(const TrainingArguments& args,
                                                          const PrecisionRecipe& recipe) {
  if (!args.load_in_4bit) return std::nullopt;
  if (!args.use_peft) {
    throw ValueError(
        "load_in_4bit: true without use_peft; a 4-bit base is frozen and trains "
        "only through LoRA adapters");
  }
  Quant4bitConfig config;
  config.quant_type = parse_quant_4bit_type(args.bnb_4bit_quant_type, "bnb_4bit_quant_type");
  config.double_quant = args.bnb_4bit_use_double_quant;
  // Unset: the recipe's compute dtype, as TRL passes its model dtype to BitsAndBytesConfig.
  config.compute_dtype = args.bnb_4bit_compute_dtype.empty()
                             ? recipe.autocast_dtype.value_or(recipe.param_dtype)
                             : named_dtype(args.bnb_4bit_compute_dtype, "bnb_4bit_compute_dtype");
  config.quant_storage = named_dtype(args.bnb_4bit_quant_storage, "bnb_4bit_quant_storage");
  check_quant_4bit_config(config, "load_in_4bit");
  return config;
}

std::optional<Fp8Recipe> training_fp8_recipe(const TrainingArguments& args) {
  if (!args.fp8) return std::nullopt;
  Fp8Recipe recipe;
  recipe.kind = parse_fp8_recipe_kind(args.fp8_recipe);
  recipe.format = parse_fp8_format(args.fp8_format);
  recipe.amax_history_len = args.fp8_amax_history_len;
  recipe.amax_compute_algo = parse_amax_compute_algo(args.fp8_amax_compute_algo);
  HEADROOM_CHECK_VALUE(args.fp8_margin >= 0 && args.fp8_margin <= 64,
                       "fp8_margin: ", args.fp8_margin, " is outside [0, 64]");
  recipe.margin = static_cast<int>(args.fp8_margin);
  recipe.validate();
  return recipe;
}

TrainingConfig resolve_training_config(const TrainingArguments& args) {
  check_numbers(args);
  TrainingConfig config;
  config.args = args;
  config.device = resolve_device(args.device);
  config.recipe = training_precision(args);
  // The policy is read whether or not checkpointing is on: a typo fails before a long run
  // that would have turned it on later.
  const CheckpointPolicy policy = parse_checkpoint_policy(args.gradient_checkpointing_policy);
  if (args.gradient_checkpointing) config.checkpointing = policy;
  if (args.tiled_mlp_tokens < 0) {
    throw ValueError(str_cat("tiled_mlp_tokens: ", args.tiled_mlp_tokens,
                             " is negative (0: ceil(tokens / hidden) tiles)"));
  }
  if (args.tiled_mlp) config.mlp_tile_tokens = args.tiled_mlp_tokens;

  // The pure bf16 recipe keeps AdamW's moments in bf16 (Note [Precision recipes]).
  config.optimizer = parse_optimizer_kind(args.optim);
  OptimizerArguments& optimizer = config.optimizer_arguments;
  optimizer.optim = args.optim;
  if (args.optim == "adamw_torch" && config.recipe.optimizer_state_dtype == DType::bf16) {
    config.optimizer = OptimizerKind::adamw_bf16;
    optimizer.optim = optimizer_kind_name(OptimizerKind::adamw_bf16);
  }
  optimizer.optim_args = args.optim_args;
  optimizer.learning_rate = args.learning_rate;
  optimizer.weight_decay = args.weight_decay;
  optimizer.adam_beta1 = args.adam_beta1;
  optimizer.adam_beta2 = args.adam_beta2;
  optimizer.adam_epsilon = args.adam_epsilon;
  optimizer.kahan_summation = config.recipe.kahan_summation;
  optimizer.seed = static_cast<uint64_t>(args.seed);
  parse_optim_args(args.optim_args);  // "optim_args: entry ... is not key=value"
  config.lr_scheduler = parse_scheduler_type(args.lr_scheduler_type);

  if (args.use_peft) {
    config.lora = training_lora_config(args);
    config.lora->validate();
  }
  config.quant_4bit = training_quant_4bit_config(args, config.recipe);
  config.fp8 = training_fp8_recipe(args);
  config.zero_stage = training_zero_stage(args);
  config.offload = training_offload(args);
  if (config.mlp_tile_tokens) {
    // The tiles' backward recomputes the MLP with the parameters its layers hold at that time:
    // the blocks' own, not the copies that offload and ZeRO-3 put in for a block's forward; and
    // each tile is a forward to FP8's delayed scaling, whose history would count tiles as steps.
    const char* other = config.offload.params    ? "offload_params"
                        : config.zero_stage == 3 ? "zero_stage 3"
                        : config.fp8             ? "fp8"
                                                 : nullptr;
    if (other != nullptr) {
      throw NotImplementedError(str_cat("tiled_mlp: not with ", other,
                                        " yet; it works with checkpointing, offload_activations, "
                                        "offload_optimizer, LoRA / QLoRA and ZeRO stages 0-2"));
    }
  }

  config.eval_strategy = parse_interval_strategy(args.eval_strategy, "eval_strategy");
  if (args.eval_loss_target > 0.0 && config.eval_strategy != IntervalStrategy::steps) {
    throw ValueError(str_cat("eval_loss_target: needs eval_strategy steps (it is ",
                             args.eval_strategy, "): the target is checked at evaluations"));
  }
  config.packing_strategy = training_packing_strategy(args);
  if (args.dataset_text_field.empty()) {
    throw ValueError("dataset_text_field: is empty (the rows' text field; TRL's default is text)");
  }
  config.save_strategy = parse_interval_strategy(args.save_strategy, "save_strategy");
  if (config.save_strategy == IntervalStrategy::steps && args.save_steps < 1) {
    throw ValueError(str_cat("save_steps: ", args.save_steps, " is below 1"));
  }
  if (!args.memory_limit.empty()) {
    const auto bytes = static_cast<int64_t>(parse_byte_size(args.memory_limit, "memory_limit"));
    if (bytes <= 0) {
      throw ValueError(str_cat("memory_limit: '", args.memory_limit,
                               "' is no memory at all (leave the option out for no cap)"));
    }
    config.memory_limit = bytes;
  }
  return config;
}

}  // namespace headroom
