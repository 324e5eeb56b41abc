// resolve_training_config: each choice typed once, with the errors named by their option.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "core/error.h"
#include "train/training_config.h"

namespace headroom {
namespace {

std::string error_of(const TrainingArguments& args) {
  try {
    resolve_training_config(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TrainingConfig, DefaultsAreTyped) {
  TrainingArguments args;
  args.device = "cpu";
  const TrainingConfig c = resolve_training_config(args);  // no data needed: the source checks it
  EXPECT_TRUE(c.device.is_cpu());
  EXPECT_EQ(c.recipe.precision, Precision::fp32);
  EXPECT_FALSE(c.checkpointing);
  EXPECT_EQ(c.optimizer, OptimizerKind::adamw);
  EXPECT_EQ(c.optimizer_arguments.optim, "adamw_torch");
  EXPECT_EQ(c.lr_scheduler, SchedulerType::linear);
  EXPECT_FALSE(c.lora || c.quant_4bit || c.fp8 || c.memory_limit);
  EXPECT_EQ(c.zero_stage, 0);
  EXPECT_FALSE(c.offload.any());
  EXPECT_EQ(c.eval_strategy, IntervalStrategy::no);
  EXPECT_EQ(c.save_strategy, IntervalStrategy::steps);
  EXPECT_FALSE(c.updates_in_backward());
}

TEST(TrainingConfig, TiledMlpTypedAndRefusedWhereItsRecomputeWouldBeWrong) {
  TrainingArguments args;
  args.device = "cpu";
  args.tiled_mlp = true;
  EXPECT_EQ(resolve_training_config(args).mlp_tile_tokens, 0);  // automatic tiles
  args.tiled_mlp_tokens = 512;
  EXPECT_EQ(resolve_training_config(args).mlp_tile_tokens, 512);
  args.tiled_mlp = false;
  EXPECT_FALSE(resolve_training_config(args).mlp_tile_tokens);
  args.tiled_mlp_tokens = -1;
  EXPECT_NE(error_of(args).find("tiled_mlp_tokens: -1 is negative"), std::string::npos);
  args.tiled_mlp_tokens = 0;
  args.tiled_mlp = true;
  // The tiles' backward would recompute with the host-resident (or sharded) parameters, and
  // delayed FP8 scaling would count each tile as a step.
  TrainingArguments offloaded = args, sharded = args, fp8 = args;
  offloaded.offload_params = true;
  sharded.zero_stage = 3;
  fp8.fp8 = true;
  EXPECT_NE(error_of(offloaded).find("tiled_mlp: not with offload_params"), std::string::npos);
  EXPECT_NE(error_of(sharded).find("tiled_mlp: not with zero_stage 3"), std::string::npos);
  EXPECT_NE(error_of(fp8).find("tiled_mlp: not with fp8"), std::string::npos);
}

TEST(TrainingConfig, EvalLossTargetNeedsEvaluationsAndAFiniteLoss) {
  TrainingArguments args;
  args.device = "cpu";
  args.eval_loss_target = 2.0;
  EXPECT_EQ(error_of(args),
            "eval_loss_target: needs eval_strategy steps (it is no): the target is checked at "
            "evaluations");
  args.eval_strategy = "steps";
  EXPECT_EQ(error_of(args), "no error");
  args.eval_loss_target = -1.0;
  EXPECT_EQ(error_of(args), "eval_loss_target: -1 is not a finite loss of 0 (none) or more");
  args.eval_loss_target = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(error_of(args).find("eval_loss_target: nan"), std::string::npos) << error_of(args);
}

TEST(TrainingConfig, PureBf16KeepsAdamWMomentsInBf16) {
  TrainingArguments args;
  args.precision = "pure_bf16";
  TrainingConfig c = resolve_training_config(args);
  EXPECT_EQ(c.optimizer, OptimizerKind::adamw_bf16);
  EXPECT_EQ(c.optimizer_arguments.optim, "adamw_bf16");
  args.optim = "adamw_8bit";  // its states are its own
  c = resolve_training_config(args);
  EXPECT_EQ(c.optimizer, OptimizerKind::adamw_8bit);
  EXPECT_EQ(c.optimizer_arguments.optim, "adamw_8bit");
  args.optim = "lomo";
  EXPECT_TRUE(resolve_training_config(args).updates_in_backward());
}

TEST(TrainingConfig, CheckpointingPolicyParsedOnceAndAlways) {
  TrainingArguments args;
  args.gradient_checkpointing_policy = "every_2";
  EXPECT_FALSE(resolve_training_config(args).checkpointing);
  args.gradient_checkpointing = true;
  const TrainingConfig c = resolve_training_config(args);
  ASSERT_TRUE(c.checkpointing);
  EXPECT_EQ(c.checkpointing->kind, CheckpointPolicy::Kind::every_n);
  EXPECT_EQ(c.checkpointing->every, 2);
  // A typo fails whether or not checkpointing is on.
  args.gradient_checkpointing = false;
  args.gradient_checkpointing_policy = "every_0";
  EXPECT_NE(error_of(args).find("gradient_checkpointing_policy: 'every_0'"), std::string::npos);
}

TEST(TrainingConfig, ErrorsStartWithTheOption) {
  TrainingArguments args;
  args.optim = "adam_9bit";
  EXPECT_EQ(error_of(args).rfind("optim: unknown optimizer 'adam_9bit'", 0), 0u) << error_of(args);
  args = {};
  args.eval_strategy = "epoch";
  EXPECT_EQ(error_of(args), "eval_strategy: unknown value 'epoch' (expected one of no, steps)");
  args = {};
  args.save_strategy = "sometimes";
  EXPECT_EQ(error_of(args).rfind("save_strategy: unknown value 'sometimes'", 0), 0u);
  args = {};
  args.load_in_4bit = true;
  EXPECT_EQ(error_of(args).rfind("load_in_4bit: true without use_peft", 0), 0u);
  args = {};
  args.lr_scheduler_type = "sawtooth";
  EXPECT_NE(error_of(args).find("sawtooth"), std::string::npos);
  args = {};
  args.memory_limit = "0";
  EXPECT_EQ(error_of(args).rfind("memory_limit: '0' is no memory at all", 0), 0u);
  args = {};
  args.optim_args = "momentum";
  EXPECT_EQ(error_of(args).rfind("optim_args: entry 'momentum' is not key=value", 0), 0u);
  args = {};
  args.gradient_accumulation_steps = 0;
  EXPECT_EQ(error_of(args), "gradient_accumulation_steps: 0 is below 1");
}

TEST(TrainingConfig, AdaptersQuantizationFp8AndMemory) {
  TrainingArguments args;
  args.use_peft = true;
  args.lora_r = 4;
  args.load_in_4bit = true;
  args.bnb_4bit_quant_type = "nf4";
  args.bf16 = true;
  args.fp8 = true;
  args.fp8_recipe = "current";
  args.memory_limit = "24GiB";
  args.eval_strategy = "steps";
  const TrainingConfig c = resolve_training_config(args);
  ASSERT_TRUE(c.lora && c.quant_4bit && c.fp8 && c.memory_limit);
  EXPECT_EQ(c.lora->r, 4);
  EXPECT_EQ(c.quant_4bit->quant_type, Quant4bitType::nf4);
  EXPECT_EQ(c.quant_4bit->compute_dtype, DType::bf16);  // the recipe's, as TRL passes it
  EXPECT_EQ(c.fp8->kind, Fp8RecipeKind::current);
  EXPECT_EQ(*c.memory_limit, int64_t{24} << 30);
  EXPECT_EQ(c.eval_strategy, IntervalStrategy::steps);
}

}  // namespace
}  // namespace headroom
