// Offload to host memory (Note [Optimizer offload], Note [The host pool]): runs with offload give
// the same losses and weights as without, bit for bit on the CPU; the device pool's peak drops
// by what the planner predicts and the host pool's peak equals its prediction, to the byte.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hf_config.h"
#include "nn/tiny_text.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "plan/dry_run.h"
#include "train/deepspeed_config.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

using test_data::TempDir;
using test_data::tiny_training_args;

struct RunResult {
  std::vector<double> losses;
  std::vector<std::vector<unsigned char>> weights;  // every parameter's bytes, in order
  int64_t peak_allocated = 0, peak_reserved = 0;
  int64_t host_peak_allocated = 0, host_peak_reserved = 0;
};

// Trains `args` as a fresh process would (empty caches) and collects what metrics.jsonl logs.
RunResult train(const TrainingArguments& args) {
  empty_cache(kCPU);
  host_pool(kCPU).empty_cache();
  RunResult out;
  Trainer trainer(args);
  EXPECT_EQ(trainer.train(), 0);
  for (const auto& entry : trainer.log_history()) {
    if (!entry.contains("loss") || !entry.contains("peak_allocated_bytes")) continue;
    out.losses.push_back(entry["loss"].get<double>());
    out.peak_allocated = entry["peak_allocated_bytes"].get<int64_t>();
    out.peak_reserved = entry["peak_reserved_bytes"].get<int64_t>();
    if (entry.contains("host_peak_allocated_bytes")) {
      out.host_peak_allocated = entry["host_peak_allocated_bytes"].get<int64_t>();
      out.host_peak_reserved = entry["host_peak_reserved_bytes"].get<int64_t>();
    }
  }
  for (const Tensor& p : trainer.model().parameters()) {
    const auto* bytes = static_cast<const unsigned char*>(p.data_ptr());
    out.weights.emplace_back(bytes, bytes + p.nbytes());
  }
  return out;
}

TrainingArguments offload_args(const std::filesystem::path& root, const std::string& precision) {
  TrainingArguments args = tiny_training_args(root);
  // Enough text that every batch of 48 windows is full, as the dry run's are.
  std::ofstream data(args.data);
  for (int i = 0; i < 40; ++i) data << test_data::kTinyText << "\n";
  args.precision = precision;
  args.gradient_accumulation_steps = 2;  // the host adds the second micro-batch's gradients
  args.max_grad_norm = 1.0;              // clipping on the host's gradients
  args.save_strategy = "no";
  return args;
}

void expect_same_training(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << "step " << i;
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i)
    EXPECT_EQ(a.weights[i], b.weights[i]) << "parameter " << i;
}

// `args` trained without and then with the offload `enable` turns on: the same losses and
// weights, the device and host peaks of the run with offload equal to its plan, the device's drop
// equal to the plans' difference, and something held on the host. Returns the run with offload.
RunResult expect_offload_as_planned(TrainingArguments args,
                                    const std::function<void(TrainingArguments&)>& enable) {
  const DryRunResult plan_without = dry_run_training(args);
  const RunResult without = train(args);
  enable(args);
  const DryRunResult plan_with = dry_run_training(args);
  const RunResult with = train(args);
  expect_same_training(without, with);
  EXPECT_EQ(with.peak_allocated, plan_with.peak_allocated_bytes);
  EXPECT_EQ(with.peak_reserved, plan_with.peak_reserved_bytes);
  EXPECT_EQ(with.host_peak_allocated, plan_with.host_peak_allocated_bytes);
  EXPECT_EQ(with.host_peak_reserved, plan_with.host_peak_reserved_bytes);
  EXPECT_EQ(without.peak_allocated - with.peak_allocated,
            plan_without.peak_allocated_bytes - plan_with.peak_allocated_bytes);
  EXPECT_LT(with.peak_allocated, without.peak_allocated);
  EXPECT_GT(with.host_peak_allocated, 0);
  EXPECT_EQ(without.host_peak_allocated, 0);
  return with;
}

class OptimizerOffload : public testing::TestWithParam<std::string> {};

TEST_P(OptimizerOffload, TrainsBitIdenticallyAndTheDevicePoolDropsAsPlanned) {
  TempDir tmp("offload_optimizer_" + GetParam());
  // Gradients and the moments leave the device.
  expect_offload_as_planned(offload_args(tmp.path(), GetParam()),
                            [](TrainingArguments& a) { a.offload_optimizer = true; });
}

INSTANTIATE_TEST_SUITE_P(Recipes, OptimizerOffload, testing::Values("bf16", "pure_bf16"));

TEST(OptimizerOffload, APartialRatioTrainsBitIdenticallyAndHoldsLessOnTheHost) {
  TempDir tmp("offload_ratio");
  TrainingArguments args = offload_args(tmp.path(), "bf16");
  const RunResult without = train(args);
  args.offload_optimizer = true;
  const RunResult full = train(args);
  args.offload_optimizer_ratio = 0.5;
  const DryRunResult plan = dry_run_training(args);
  const RunResult half = train(args);
  expect_same_training(without, half);
  EXPECT_EQ(half.peak_allocated, plan.peak_allocated_bytes);
  EXPECT_EQ(half.host_peak_allocated, plan.host_peak_allocated_bytes);
  EXPECT_LT(half.host_peak_allocated, full.host_peak_allocated);
  EXPECT_GT(half.peak_allocated, full.peak_allocated);
}

TEST(OptimizerOffload, ResumesFromACheckpointWrittenWithoutOffload) {
  TempDir tmp("offload_resume");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.precision = "bf16";
  const RunResult straight = train(args);  // checkpoints at steps 2 and 4
  TrainingArguments resumed = args;
  resumed.output_dir = (tmp.path() / "resumed").string();
  std::filesystem::create_directories(resumed.output_dir);
  std::filesystem::copy(std::filesystem::path(args.output_dir) / "checkpoint-2",
                        std::filesystem::path(resumed.output_dir) / "checkpoint-2",
                        std::filesystem::copy_options::recursive);
  resumed.resume_from_checkpoint = "last";
  resumed.offload_optimizer = true;
  const RunResult after = train(resumed);
  EXPECT_EQ(after.losses, straight.losses);  // steps 1-2 from the checkpoint's log_history
  EXPECT_EQ(after.weights, straight.weights);
}

TEST(OptimizerOffload, LomoHasNoStatesToOffload) {
  TempDir tmp("offload_lomo");
  TrainingArguments args = offload_args(tmp.path(), "pure_bf16");
  args.gradient_accumulation_steps = 1;
  args.optim = "lomo";
  args.offload_optimizer = true;
  EXPECT_THROW({ Trainer trainer(args); }, ValueError);
}

// Blocks' saved tensors of 64 KiB or more (batch 48: a block input [48, 16, 48] in bf16 is 72 KiB)
// go to the host and come back one block ahead; with checkpointing only the checkpoint inputs do.
struct ActivationCase {
  std::string precision;
  bool checkpointing;
};

// offload_args with `layers` blocks, 3 steps, checkpointing as given.
TrainingArguments deeper_args(const std::filesystem::path& root, const std::string& precision,
                              int64_t layers, bool checkpointing) {
  TrainingArguments args = offload_args(root, precision);
  GPT2Config config = test_data::tiny_text_gpt2();
  config.n_positions = 16;
  config.n_layer = layers;
  write_hf_config(args.model, config);
  args.max_steps = 3;
  args.gradient_checkpointing = checkpointing;
  return args;
}

const auto kRecipeCases =
    testing::Values(ActivationCase{"bf16", false}, ActivationCase{"bf16", true},
                    ActivationCase{"pure_bf16", false}, ActivationCase{"pure_bf16", true});

std::string recipe_case_name(const testing::TestParamInfo<ActivationCase>& info) {
  return info.param.precision + (info.param.checkpointing ? "_checkpointing" : "");
}

class ActivationOffload : public testing::TestWithParam<ActivationCase> {};

TEST_P(ActivationOffload, TrainsBitIdenticallyAndTheDevicePoolDropsAsPlanned) {
  const ActivationCase& c = GetParam();
  TempDir tmp(str_cat("offload_activations_", c.precision, "_", c.checkpointing));
  // 6 blocks: with checkpointing the device then holds 2 block inputs in backward instead of 6.
  TrainingArguments args = deeper_args(tmp.path(), c.precision, 6, c.checkpointing);
  args.per_device_train_batch_size = 48;
  args.gradient_accumulation_steps = 1;
  expect_offload_as_planned(args, [](TrainingArguments& a) { a.offload_activations = true; });
}

INSTANTIATE_TEST_SUITE_P(Recipes, ActivationOffload, kRecipeCases, recipe_case_name);

// The blocks' weights on the host, copied in per block (Note [Parameter offload]); the optimizer
// goes with them. And every kind at once.
class ParameterOffload : public testing::TestWithParam<ActivationCase> {};

TEST_P(ParameterOffload, TrainsBitIdenticallyAndTheDevicePoolDropsAsPlanned) {
  const ActivationCase& c = GetParam();
  TempDir tmp(str_cat("offload_params_", c.precision, "_", c.checkpointing));
  const TrainingArguments args = deeper_args(tmp.path(), c.precision, 4, c.checkpointing);
  expect_offload_as_planned(args, [](TrainingArguments& a) { a.offload_params = true; });
}

INSTANTIATE_TEST_SUITE_P(Recipes, ParameterOffload, kRecipeCases, recipe_case_name);

// QLoRA: the frozen 4-bit base's blocks go to the host with the adapters, and backward's
// linear_4bit reads them back through the same handles (70B QLoRA on one 24 GB card).
TEST(ParameterOffload, QloraBaseTrainsBitIdenticallyAsPlanned) {
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing);
    TempDir tmp(str_cat("offload_params_qlora_", checkpointing));
    TrainingArguments args = deeper_args(tmp.path(), "bf16", 4, checkpointing);
    args.use_peft = args.load_in_4bit = true;
    args.bnb_4bit_quant_type = "nf4";
    args.bnb_4bit_use_double_quant = true;  // the nested absmax and code travel too
    args.lora_target_modules = "all-linear";
    args.lora_dropout = 0.0;
    expect_offload_as_planned(args, [](TrainingArguments& a) { a.offload_params = true; });
  }
}

// The blocks are made in the host pool as the model loads: a 7B model's load holds only the
// embeddings and the LM head on the device (2 x 32000 x 4096 fp32), never its 6.2B block
// parameters (planned on the meta device, as the CPU tests above check the run equals).
TEST(ParameterOffload, LoadsTheBlocksIntoTheHostPool) {
  TrainingArguments args;
  args.model = "llama-7b";
  args.max_seq_length = 16;
  args.per_device_train_batch_size = 1;
  args.bf16 = args.gradient_checkpointing = args.offload_params = true;
  args.device = "cpu";
  const DryRunResult plan = dry_run_training(args, {.steps = 1});
  const int64_t head_and_embeddings = int64_t{2} * 32000 * 4096 * 4;
  EXPECT_GE(plan.load_peak_allocated_bytes, head_and_embeddings);
  EXPECT_LT(plan.load_peak_allocated_bytes, head_and_embeddings + (int64_t{256} << 20));
  EXPECT_GT(plan.host_peak_allocated_bytes, int64_t{6} * 1000 * 1000 * 1000 * 4);
}

TEST(Offload, AllThreeKindsTogether) {
  for (const std::string precision : {"bf16", "pure_bf16"}) {
    SCOPED_TRACE(precision);
    TempDir tmp("offload_all_" + precision);
    TrainingArguments args = deeper_args(tmp.path(), precision, 4, true);
    args.per_device_train_batch_size = 48;
    expect_offload_as_planned(args, [](TrainingArguments& a) {
      a.offload_optimizer = a.offload_activations = a.offload_params = true;
    });
  }
}

TEST(DeepSpeedConfig, ReadsOffloadAndNamesWhatItIgnores) {
  TempDir tmp("deepspeed_offload");
  const std::string path = (tmp.path() / "ds.json").string();
  std::ofstream(path) << R"({"train_batch_size": "auto", "zero_optimization": {"stage": 0,
      "overlap_comm": true, "offload_optimizer": {"device": "cpu", "pin_memory": false,
      "ratio": 0.25, "buffer_count": 4}}})";
  const DeepSpeedConfig config = read_deepspeed_config(path);
  EXPECT_EQ(config.zero_stage, 0);
  EXPECT_EQ(config.offload_optimizer, true);
  EXPECT_EQ(config.offload_optimizer_ratio, 0.25);
  EXPECT_EQ(config.offload_optimizer_pin_memory, false);
  EXPECT_FALSE(config.offload_param.has_value());
  EXPECT_EQ(config.ignored_keys,
            (std::vector<std::string>{"train_batch_size", "zero_optimization.overlap_comm",
                                      "zero_optimization.offload_optimizer.buffer_count"}));
  const std::string warning = deepspeed_ignored_keys_warning(path, config);
  EXPECT_NE(warning.find("zero_optimization.overlap_comm"), std::string::npos) << warning;
  TrainingArguments args;
  args.deepspeed = path;
  const OffloadSettings offload = training_offload(args);
  EXPECT_TRUE(offload.optimizer);
  EXPECT_EQ(offload.optimizer_ratio, 0.25);
  EXPECT_FALSE(offload.pin_memory);
  args.offload_optimizer_ratio = 0.5;
  EXPECT_THROW(training_offload(args), ValueError);

  std::ofstream(path) << R"({"zero_optimization": {"offload_param": {"device": "nvme"}}})";
  EXPECT_THROW(read_deepspeed_config(path), NotImplementedError);
  std::ofstream(path) << R"({"zero_optimization": {"offload_optimizer": {"device": "disk"}}})";
  EXPECT_THROW(read_deepspeed_config(path), ValueError);
  // A device that is no string is a ValueError naming the file and the key, not nlohmann's
  // type_error (exit 1, no file name).
  std::ofstream(path) << R"({"zero_optimization": {"offload_optimizer": {"device": 5}}})";
  try {
    read_deepspeed_config(path);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("offload_optimizer.device"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace headroom
