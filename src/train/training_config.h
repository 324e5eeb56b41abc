// The run typed once: TrainingArguments' choices (and the DeepSpeed file's) resolved into the
// values the Trainer, the dry run, the planner and its search use, each user error named here.
#pragma once

#include <cstdint>
#include <optional>

#include "amp/precision.h"
#include "core/device.h"
#include "data/sft_examples.h"
#include "memsave/checkpoint_policy.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer_factory.h"
#include "peft/lora_config.h"
#include "quant/fp8_linear.h"
#include "quant/quant_4bit.h"
#include "train/training_arguments.h"

namespace headroom {

// What a run offloads to host memory (memsave): the offload_* options, with the `deepspeed`
// file's zero_optimization.offload_optimizer / offload_param turning them on and giving the
// ratio and pin_memory.
struct OffloadSettings {
  bool optimizer = false;
  double optimizer_ratio = 1.0;
  bool activations = false;
  bool params = false;
  bool pin_memory = true;
  bool any() const { return optimizer || activations || params; }
};

// HF's IntervalStrategy as far as headroom has it (eval_strategy, save_strategy).
enum class IntervalStrategy { no, steps };

struct TrainingConfig {
  // The options as given: the numbers, paths and names that need no typing are read from here;
  // every choice below is read from its typed field, never from these strings.
  TrainingArguments args;
  Device device;  // `device` resolved ("auto": train/model_source.h)
  PrecisionRecipe recipe;
  std::optional<CheckpointPolicy> checkpointing;  // with gradient_checkpointing: its policy
  std::optional<int64_t> mlp_tile_tokens;         // with tiled_mlp: tiled_mlp_tokens (0: auto)
  // The optimizer as the recipe runs it (adamw_torch under pure bf16 keeps bf16 moments:
  // adamw_bf16) and what make_optimizer builds it from (its `optim` spelled so too).
  OptimizerKind optimizer = OptimizerKind::adamw;
  OptimizerArguments optimizer_arguments;
  SchedulerType lr_scheduler = SchedulerType::linear;
  std::optional<LoraConfig> lora;             // with use_peft
  std::optional<Quant4bitConfig> quant_4bit;  // with load_in_4bit
  std::optional<Fp8Recipe> fp8;               // with fp8
  int64_t zero_stage = 0;                     // under mpirun; a single process ignores it
  OffloadSettings offload;
  IntervalStrategy eval_strategy = IntervalStrategy::no;
  IntervalStrategy save_strategy = IntervalStrategy::steps;
  std::optional<int64_t> memory_limit;                      // bytes; unset: no cap
  PackingStrategy packing_strategy = PackingStrategy::bfd;  // with packing

  // Whether the optimizer updates inside backward (LOMO) and keeps no gradients.
  bool updates_in_backward() const { return headroom::updates_in_backward(optimizer); }
};

// Every option of `args` checked and typed, the DeepSpeed file read once. ValueError (or
// NotImplementedError for a name HF has and headroom does not) whose message starts with the
// option's name ("optim: ...", "lora_r: ..."), so that a caller can name it as the user wrote
// it (apps/). The training data is not looked at: the data source checks it.
TrainingConfig resolve_training_config(const TrainingArguments& args);

// The pieces resolve_training_config puts together, each on its own.

// packing_strategy: bfd, bfd_split (or its old name bfd-requeue) or wrapped.
PackingStrategy training_packing_strategy(const TrainingArguments& args);

// The ZeRO stage: zero_stage, or the `deepspeed` file's zero_optimization.stage (ValueError
// naming the file when they differ or it is malformed); 0 when neither.
int64_t training_zero_stage(const TrainingArguments& args);

// What `args` offloads (OffloadSettings; ValueError naming the file when its ratio differs from
// an explicit one).
OffloadSettings training_offload(const TrainingArguments& args);

// The recipe `args` asks for: `precision` when set (parse_precision), else bf16 / fp16
// (ValueError for both), else fp32.
PrecisionRecipe training_precision(const TrainingArguments& args);

// The LoraConfig of `args`' TRL options (use_peft, lora_r, ...); base_model_name_or_path is
// args.model. Not validated (LoraConfig::validate does that).
LoraConfig training_lora_config(const TrainingArguments& args);

// The Quant4bitConfig of `args`' 4-bit options (load_in_4bit, bnb_4bit_*) under `recipe`, or
// nullopt without load_in_4bit. ValueError naming the option for a bad value, and for
// load_in_4bit without use_peft.
std::optional<Quant4bitConfig> training_quant_4bit_config(const TrainingArguments& args,
                                                          const PrecisionRecipe& recipe);

// The FP8 recipe of `args`' fp8_* options, or nullopt without fp8. ValueError naming the option
// for a bad value.
std::optional<Fp8Recipe> training_fp8_recipe(const TrainingArguments& args);

}  // namespace headroom
