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

// A run resumed from checkpoint-2 repeats steps 3 and 4 to the last bit with every recipe:
// delayed scaling's amax histories and scales come back from fp8_state.safetensors.
TEST(Fp8Training, EveryRecipeResumesBitForBit) {
  for (const char* recipe : {"delayed", "current", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    TempDir tmp(std::string("fp8_resume_") + recipe);
    TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
    args.fp8 = true;
    args.fp8_recipe = recipe;
    args.fp8_amax_history_len = 3;  // shorter than the run: the history wraps before the save
    Trainer full(args);
    ASSERT_EQ(full.train(), 0);
    const auto expected = losses_of(full);
    ASSERT_EQ(expected.size(), 4u);
    TrainingArguments again = args;
    again.output_dir = (tmp.path() / "resumed").string();
    again.resume_from_checkpoint = (tmp.path() / "out" / "checkpoint-2").string();
    Trainer resumed(again);
    ASSERT_EQ(resumed.train(), 0);
    const auto actual = losses_of(resumed);
    for (int64_t step = 3; step <= 4; ++step) {
      EXPECT_EQ(actual.at(step), expected.at(step)) << "step " << step;
    }
  }
}

// A resume whose FP8 options differ from the checkpoint's is refused before training, naming
// what differs: the history length (part of the recipe), FP8 off, FP8 on.
TEST(Fp8Training, AResumeWithOtherFp8OptionsIsRefused) {
  TempDir tmp("fp8_resume_changed");
  TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
  args.max_steps = 2;
  args.fp8 = true;
  args.fp8_amax_history_len = 16;
  ASSERT_EQ(Trainer(args).train(), 0);
  TrainingArguments plain = args;
  plain.fp8 = false;
  plain.output_dir = (tmp.path() / "plain").string();
  ASSERT_EQ(Trainer(plain).train(), 0);

  auto refusal = [&](TrainingArguments a, const std::string& from) {
    a.output_dir = (tmp.path() / "resumed").string();
    a.overwrite_output_dir = true;
    a.resume_from_checkpoint = (tmp.path() / from / "checkpoint-2").string();
    a.max_steps = 4;
    try {
      Trainer(a).train();
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  TrainingArguments longer = args;
  longer.fp8_amax_history_len = 32;
  const std::string history = refusal(longer, "out");
  EXPECT_NE(history.find("fp8_recipe"), std::string::npos) << history;
  EXPECT_NE(history.find("history 16"), std::string::npos) << history;
  EXPECT_NE(history.find("history 32"), std::string::npos) << history;
  const std::string off = refusal(plain, "out");
  EXPECT_NE(off.find("fp8 is true in the checkpoint and false in this run"), std::string::npos)
      << off;
  const std::string on = refusal(args, "plain");
  EXPECT_NE(on.find("fp8 is false in the checkpoint and true in this run"), std::string::npos)
      << on;
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
