// Training with --fp8: every recipe trains the tiny GPT-2 with its projections in FP8 and logs the
// step's overflow / underflow counts; FP8 composes with bf16 autocast, activation checkpointing,
// gradient accumulation and LoRA; the options are checked where they are read.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "nn/layers.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

using test_data::TempDir;
using test_data::tiny_training_args;

std::map<int64_t, double> losses_of(const Trainer& trainer) {
  std::map<int64_t, double> losses;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("loss")) losses[entry["step"].get<int64_t>()] = entry["loss"].get<double>();
  }
  return losses;
}

int64_t fp8_layers(Trainer& trainer) {
  int64_t n = 0;
  for (auto& [name, module] : trainer.model().named_modules()) {
    const auto* layer = dynamic_cast<const Linear*>(module);
    n += layer && layer->fp8() != nullptr;
  }
  return n;
}

TEST(Fp8Training, EveryRecipeTrainsTheTinyGpt2AndLogsItsCounts) {
  for (const char* recipe : {"delayed", "current", "mxfp8", "block"}) {
    SCOPED_TRACE(recipe);
    TempDir tmp(std::string("fp8_") + recipe);
    TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
    args.max_steps = 12;
    args.save_strategy = "no";
    args.fp8 = true;
    args.fp8_recipe = recipe;
    args.fp8_amax_history_len = 16;
    Trainer trainer(args);
    // 2 blocks x (c_attn, c_proj, c_fc, mlp c_proj); GPT-2's tied LM head is no Linear.
    EXPECT_EQ(fp8_layers(trainer), 8);
    ASSERT_EQ(trainer.train(), 0);
    const auto losses = losses_of(trainer);
    ASSERT_EQ(losses.size(), 12u);
    EXPECT_LT(losses.rbegin()->second, 0.8 * losses.begin()->second);
    for (const auto& entry : trainer.log_history()) {
      if (!entry.contains("loss")) continue;
      EXPECT_TRUE(entry.contains("fp8_overflow"));
      EXPECT_GE(entry["fp8_underflow"].get<int64_t>(), 0);
    }
  }
}

TEST(Fp8Training, ComposesWithBf16CheckpointingAccumulationAndLora) {
  struct Setup {
    const char* name;
    bool bf16, checkpointing, lora;
    int64_t accumulation;
  };
  for (const Setup& s : {Setup{"bf16+checkpointing+accumulation", true, true, false, 2},
                         Setup{"lora+bf16", true, false, true, 1},
                         Setup{"selective checkpointing", false, true, false, 1}}) {
    SCOPED_TRACE(s.name);
    TempDir tmp("fp8_compose");
    TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
    args.max_steps = 6;
    args.save_strategy = "no";
    args.fp8 = true;
    args.bf16 = s.bf16;
    args.gradient_checkpointing = s.checkpointing;
    if (std::string(s.name) == "selective checkpointing") {
      args.gradient_checkpointing_policy = "selective";
    }
    args.gradient_accumulation_steps = s.accumulation;
    args.use_peft = s.lora;
    Trainer trainer(args);
    ASSERT_EQ(trainer.train(), 0);
    const auto losses = losses_of(trainer);
    ASSERT_EQ(losses.size(), 6u);
    for (const auto& [step, loss] : losses) EXPECT_TRUE(std::isfinite(loss)) << step;
    if (!s.lora) {
      EXPECT_LT(losses.rbegin()->second, losses.begin()->second);
    }
  }
}

TEST(Fp8Training, BadOptionsAreNamed) {
  TempDir tmp("fp8_options");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.fp8 = true;
  args.fp8_recipe = "tensorwise";
  EXPECT_THROW(training_fp8_recipe(args), ValueError);
  args.fp8_recipe = "delayed";
  args.fp8_amax_history_len = 0;
  try {
    training_fp8_recipe(args);
    ADD_FAILURE() << "history length 0 accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_amax_history_len"), std::string::npos) << e.what();
  }
  args.fp8_amax_history_len = 4;
  args.fp8_format = "E4M3";
  ASSERT_TRUE(training_fp8_recipe(args).has_value());
  EXPECT_EQ(training_fp8_recipe(args)->format, Fp8Format::e4m3);
}

}  // namespace
}  // namespace headroom
