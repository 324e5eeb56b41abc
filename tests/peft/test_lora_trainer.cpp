// `headroom train --use_peft` through the Trainer: every precision recipe, checkpointing policy
// and optimizer trains the adapters only; output_dir and checkpoints hold PEFT's files; a resumed
// run repeats the uninterrupted one bit for bit; the optimizer keeps state for the adapters only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "apps/cli_run.h"
#include "core/error.h"
#include "core/json_file.h"
#include "io/safetensors.h"
#include "memory/device_memory.h"
#include "peft/lora_model.h"
#include "core/grad_mode.h"
#include "train/checkpoint.h"
#include "train/model_source.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;
using test_data::tiny_training_args;

TrainingArguments lora_args(const fs::path& root) {
  TrainingArguments args = tiny_training_args(root);
  args.use_peft = true;
  args.lora_r = 4;
  args.lora_alpha = 8;
  args.lora_dropout = 0.1;
  args.lora_target_modules = "c_attn,c_fc";
  args.learning_rate = 1e-2;
  return args;
}

std::map<int64_t, double> step_losses(const Trainer& trainer) {
  std::map<int64_t, double> losses;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("loss")) losses[entry["step"].get<int64_t>()] = entry["loss"].get<double>();
  }
  return losses;
}

// Trains `args`, checks that only the adapters moved and returns the trainer's losses.
void expect_only_adapters_train(const TrainingArguments& args, const std::string& what) {
  Trainer trainer(args);
  std::map<std::string, std::vector<float>> before;
  for (const auto& [name, p] : trainer.model().named_parameters()) {
    before[name] = p.to_float_vector();
  }
  ASSERT_EQ(trainer.train(), 0) << what;
  int moved = 0;
  for (const auto& [name, p] : trainer.model().named_parameters()) {
    const bool adapter = name.find(".lora_") != std::string::npos;
    EXPECT_EQ(p.requires_grad(), adapter) << what << " " << name;
    EXPECT_FALSE(p.grad().defined()) << what << " " << name;
    if (!adapter) {
      EXPECT_EQ(p.to_float_vector(), before[name]) << what << ": frozen " << name << " moved";
    } else if (p.to_float_vector() != before[name]) {
      ++moved;
    }
  }
  EXPECT_GT(moved, 0) << what << ": no adapter moved";
  for (const auto& [step, loss] : step_losses(trainer)) {
    EXPECT_TRUE(std::isfinite(loss)) << what << " step " << step;
  }
}

TEST(LoraTrainer, EveryRecipePolicyAndOptimizerTrainsOnlyTheAdapters) {
  for (const std::string precision : {"fp32", "bf16", "fp16", "pure_bf16"}) {
    TempDir tmp("lora_recipe_" + precision);
    TrainingArguments args = lora_args(tmp.path());
    args.precision = precision;
    args.save_strategy = "no";
    expect_only_adapters_train(args, precision);
  }
  for (const std::string policy : {"full", "every_2", "selective"}) {
    TempDir tmp("lora_policy_" + policy);
    TrainingArguments args = lora_args(tmp.path());
    args.gradient_checkpointing = true;
    args.gradient_checkpointing_policy = policy;
    args.gradient_accumulation_steps = 2;
    args.save_strategy = "no";
    expect_only_adapters_train(args, policy);
  }
  for (const std::string optim : {"sgd", "lion_32bit", "adamw_8bit", "adafactor", "lomo"}) {
    TempDir tmp("lora_optim_" + optim);
    TrainingArguments args = lora_args(tmp.path());
    args.optim = optim;
    args.save_strategy = "no";
    if (optim == "lomo") args.max_grad_norm = 0;
    expect_only_adapters_train(args, optim);
  }
}

// Steps 3 and 4 after resuming from checkpoint-2 equal the uninterrupted run's to the last bit
// (adapter weights, AdamW moments, schedule, the generator behind lora_dropout, data position).
void expect_lora_resume_repeats(const std::string& precision, bool checkpointing) {
  TempDir tmp("lora_resume_" + precision);
  TrainingArguments args = lora_args(tmp.path());
  args.precision = precision;
  args.gradient_checkpointing = checkpointing;
  Trainer full(args);
  ASSERT_EQ(full.train(), 0);
  const auto expected = step_losses(full);
  ASSERT_EQ(expected.size(), 4u);
  const fs::path checkpoint = tmp.path() / "out" / "checkpoint-2";
  EXPECT_TRUE(fs::exists(checkpoint / kAdapterWeightsFile));
  EXPECT_TRUE(fs::exists(checkpoint / kAdapterConfigFile));
  EXPECT_TRUE(fs::exists(checkpoint / kOptimizerFile));
  EXPECT_FALSE(fs::exists(checkpoint / "model.safetensors")) << "the frozen base is not saved";

  TrainingArguments resumed_args = args;
  resumed_args.output_dir = (tmp.path() / "resumed").string();
  resumed_args.resume_from_checkpoint = checkpoint.string();
  Trainer resumed(resumed_args);
  ASSERT_EQ(resumed.train(), 0);
  const auto actual = step_losses(resumed);
  for (int64_t step = 1; step <= 4; ++step) {
    EXPECT_EQ(actual.at(step), expected.at(step)) << precision << " step " << step;
  }
  const auto a = lora_state_dict(full.model()), b = lora_state_dict(resumed.model());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.to_float_vector(), b[i].second.to_float_vector()) << a[i].first;
  }
}

TEST(LoraTrainer, ResumedRunRepeatsTheUninterruptedLossesFp32) {
  expect_lora_resume_repeats("fp32", false);
}
TEST(LoraTrainer, ResumedRunRepeatsTheUninterruptedLossesFp16Checkpointed) {
  expect_lora_resume_repeats("fp16", true);
}

TEST(LoraTrainer, OutputDirHoldsPeftsFilesWhichLoadBack) {
  TempDir tmp("lora_output");
  TrainingArguments args = lora_args(tmp.path());
  args.save_strategy = "no";
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  const fs::path out = args.output_dir;
  const SafetensorsFile file((out / kAdapterWeightsFile).string());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_TRUE(file.contains("base_model.model.transformer.h.1.mlp.c_fc.lora_B.weight"));
  EXPECT_EQ(file.size(), 8u);  // A and B of c_attn and c_fc in two blocks
  const nlohmann::json config = parse_json(read_text_file((out / kAdapterConfigFile).string()), "");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8);
  EXPECT_EQ(config["fan_in_fan_out"], true);
  EXPECT_EQ(config["target_modules"], nlohmann::json({"c_attn", "c_fc"}));
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));

  // The base plus the saved adapter computes what the trained model does.
  // The directory has a config only: the base is HF's initialisation from the run's seed.
  ModelAndTokenizer loaded =
      load_model_and_tokenizer(args.model, kCPU, static_cast<uint64_t>(args.seed));
  load_lora_adapter(*loaded.model, out.string());
  const auto [ids, targets] = test_data::tiny_text_batch(0, 2, 16);
  NoGradGuard no_grad;
  trainer.model().eval();
  loaded.model->eval();
  EXPECT_EQ(loaded.model->forward(ids).to_float_vector(),
            trainer.model().forward(ids).to_float_vector());
}

// LoRA on GPT-2's lm_head (tied to wte) alone: the loss goes through the head's adapter, so B
// leaves zero and the base stays; the saved adapter scores in eval what the trained model does;
// merge refuses it (the merged weight would be the embedding's too).
TEST(LoraTrainer, AnAdapterOnTheTiedOutputHeadTrains) {
  TempDir tmp("lora_head");
  TrainingArguments args = lora_args(tmp.path());
  args.lora_target_modules = "lm_head";
  args.lora_dropout = 0.0;
  args.save_strategy = "no";
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  bool b_moved = false;
  for (const auto& [name, p] : trainer.model().named_parameters()) {
    if (name == "lm_head.lora_B.weight") {
      for (float v : p.to_float_vector()) b_moved = b_moved || v != 0.0f;
    } else if (name != "lm_head.lora_A.weight") {
      EXPECT_EQ(name.find("lora_"), std::string::npos) << name;
    }
  }
  EXPECT_TRUE(b_moved);
  ModelAndTokenizer loaded =
      load_model_and_tokenizer(args.model, kCPU, static_cast<uint64_t>(args.seed));
  load_lora_adapter(*loaded.model, args.output_dir);
  const auto [ids, targets] = test_data::tiny_text_batch(0, 2, 16);
  NoGradGuard no_grad;
  trainer.model().eval();
  loaded.model->eval();
  EXPECT_EQ(loaded.model->loss(ids, targets).item(), trainer.model().loss(ids, targets).item());
  EXPECT_EQ(loaded.model->forward(ids).to_float_vector(),
            trainer.model().forward(ids).to_float_vector());
  const CliRun merge = run_cli("merge --adapter " + args.output_dir + " --output_dir " +
                               (tmp.path() / "merged").string());
  EXPECT_NE(merge.exit_code, 0);
  EXPECT_NE(merge.err.find("shares the input embedding's weight"), std::string::npos) << merge.err;
  EXPECT_FALSE(fs::exists(tmp.path() / "merged"));
}

// The optimizer's state is the adapters': AdamW's two fp32 moments per adapter element, and
// nothing for the frozen base (a full fine-tune keeps them for every weight).
TEST(LoraTrainer, OptimizerStateIsTheAdaptersOnly) {
  TempDir tmp("lora_state");
  TrainingArguments args = lora_args(tmp.path());
  args.save_strategy = "no";
  Trainer trainer(args);
  int64_t adapter_bytes = 0;
  for (const auto& [name, p] : lora_state_dict(trainer.model())) {
    adapter_bytes += static_cast<int64_t>(p.nbytes());
  }
  const size_t before = memory_allocated(kCPU);
  trainer.step();
  const int64_t kept = static_cast<int64_t>(memory_allocated(kCPU) - before);
  // AdamW's moments (allocated as 512-byte blocks) and its step count.
  int64_t expected = 0;
  for (const auto& [name, p] : lora_state_dict(trainer.model())) {
    expected += 2 * static_cast<int64_t>((p.nbytes() + 511) / 512 * 512);
  }
  EXPECT_GE(kept, expected);
  EXPECT_LT(kept, expected + 4096) << "state beyond the adapters' (" << adapter_bytes << " bytes)";
}

TEST(LoraTrainer, BadLoraOptionsAreRefusedNamingTheOption) {
  TempDir tmp("lora_bad");
  TrainingArguments args = lora_args(tmp.path());
  args.lora_target_modules = "q_proj";
  try {
    Trainer trainer(args);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("lora_target_modules: 'q_proj' matches no linear layer"),
              std::string::npos)
        << e.what();
  }
}

// The command line and config files take TRL's names; bad values are one line, exit 2.
TEST(LoraTrainer, CommandLineAndConfigFileTakeTrlsNames) {
  TempDir tmp("lora_cli");
  const TrainingArguments args = tiny_training_args(tmp.path());
  const std::string config = (tmp.path() / "run.toml").string();
  std::ofstream(config) << "use_peft = true\nlora_r = 2\nlora_alpha = 4\n"
                           "lora_target_modules = \"c_attn, c_proj\"\nuse_rslora = true\n";
  const std::string common = " --model " + args.model + " --data " + args.data +
                             " --max_seq_length 16 --per_device_train_batch_size 2 --device cpu"
                             " --max_steps 2 --save_strategy no --sample_max_new_tokens 0"
                             " --disable_tqdm --output_dir " +
                             (tmp.path() / "out").string();
  const CliRun run = run_cli("train --config " + config + common);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json written = parse_json(
      read_text_file((tmp.path() / "out" / kAdapterConfigFile).string()), "adapter_config.json");
  EXPECT_EQ(written["r"], 2);
  EXPECT_EQ(written["lora_alpha"], 4);
  EXPECT_EQ(written["use_rslora"], true);
  EXPECT_EQ(written["target_modules"], nlohmann::json({"c_attn", "c_proj"}));
  // c_proj is in attention and in the MLP: 3 layers x 2 blocks x (A, B).
  EXPECT_EQ(SafetensorsFile((tmp.path() / "out" / kAdapterWeightsFile).string()).size(), 12u);

  expect_usage_error("train --use_peft --lora_r 0" + common, "lora_r: 0 must be > 0");
  expect_usage_error("train --use_peft --lora_dropout 1.5" + common,
                     "lora_dropout: 1.5 is outside [0, 1)");
  expect_usage_error("train --config " + config + " --lora_target_modules q_proj" + common,
                     "lora_target_modules: 'q_proj' matches no linear layer of the gpt2 model");
  expect_usage_error("train --use_peft --lora_target_modules all-linear,c_fc" + common,
                     "--lora_target_modules: 'all-linear' must be the only entry");
}

}  // namespace
}  // namespace headroom
