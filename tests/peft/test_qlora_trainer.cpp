// `headroom train --use_peft --load_in_4bit` (QLoRA) through the Trainer: a tiny Llama whose
// projections are frozen 4-bit layers (bitsandbytes' NF4 / FP4) trains LoRA adapters on them; the
// loss falls, the base keeps no gradient and no optimizer state, norms and embeddings stay in
// the recipe's dtype (no fp32 upcast), and the options take HF's / TRL's names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "apps/cli_run.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "memory/device_memory.h"
#include "nn/linear_4bit.h"
#include "peft/lora_model.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;

// tiny_training_args with a tiny Llama (its 7 projections a layer all 4-bit) in place of GPT-2.
TrainingArguments qlora_args(const fs::path& root) {
  TrainingArguments args = test_data::tiny_training_args(root);
  LlamaConfig config;
  config.vocab_size = 256;
  config.hidden_size = 64;
  config.intermediate_size = 160;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 64;
  config.bos_token_id = std::nullopt;
  config.eos_token_id = {};
  write_hf_config(args.model, config);
  args.max_steps = 10;
  args.warmup_steps = 0;
  args.learning_rate = 0.1;  // the random base maps hidden states to near-uniform logits
  args.lr_scheduler_type = "constant";
  args.save_strategy = "no";
  args.use_peft = true;
  args.lora_r = 8;
  args.lora_alpha = 16;
  args.lora_dropout = 0.0;
  args.lora_target_modules = "all-linear";
  args.load_in_4bit = true;
  args.bnb_4bit_quant_type = "nf4";
  args.bnb_4bit_use_double_quant = true;
  return args;
}

std::vector<double> losses(const Trainer& trainer) {
  std::vector<double> out;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("loss")) out.push_back(entry["loss"].get<double>());
  }
  return out;
}

// Trains `args` and checks the QLoRA invariants; `dtype` is what norms and embeddings keep.
void expect_qlora_trains(const TrainingArguments& args, DType compute, DType frozen_dtype) {
  Trainer trainer(args);
  int four_bit = 0;
  for (auto& [name, module] : trainer.model().named_modules()) {
    const auto* linear = dynamic_cast<const Linear*>(module);
    if (!linear || name.find("lora_") != std::string::npos) continue;
    if (name == "lm_head") {
      EXPECT_FALSE(is_linear_4bit(*linear)) << "lm_head stays in full precision";
      continue;
    }
    ASSERT_TRUE(is_linear_4bit(*linear)) << name;
    EXPECT_EQ(linear->weight_4bit()->quant_type, Quant4bitType::nf4);
    EXPECT_TRUE(linear->weight_4bit()->nested);
    EXPECT_EQ(linear->compute_dtype(), compute) << name;
    ASSERT_NE(linear->adapter(), nullptr) << name << " has no adapter";
    ++four_bit;
  }
  EXPECT_EQ(four_bit, 2 * 7);  // q, k, v, o, gate, up, down in each of the two layers
  std::vector<std::pair<std::string, Tensor>> frozen;
  for (const auto& [name, p] : trainer.model().named_parameters()) {
    const bool adapter = name.find(".lora_") != std::string::npos;
    EXPECT_EQ(p.requires_grad(), adapter) << name;
    EXPECT_EQ(name.find("proj.weight"), std::string::npos)
        << name << ": a 4-bit weight is no parameter";
    if (!adapter) {
      EXPECT_EQ(p.dtype(), frozen_dtype) << name << " was cast";
      frozen.emplace_back(name, p);
    }
  }
  std::vector<std::vector<float>> before;
  for (const auto& [name, p] : frozen) before.push_back(p.to_float_vector());

  // The optimizer keeps AdamW's two moments per adapter element, nothing for the base.
  const size_t start = memory_allocated(kCPU);
  trainer.step();
  const int64_t kept = static_cast<int64_t>(memory_allocated(kCPU) - start);
  int64_t expected = 0;
  for (const auto& [name, p] : lora_state_dict(trainer.model())) {
    expected += 2 * static_cast<int64_t>((p.nbytes() + 511) / 512 * 512);
  }
  EXPECT_GE(kept, expected);
  EXPECT_LT(kept, expected + 4096) << "optimizer state beyond the adapters'";

  ASSERT_EQ(trainer.train(), 0);
  for (size_t i = 0; i < frozen.size(); ++i) {
    EXPECT_FALSE(frozen[i].second.grad().defined()) << frozen[i].first << " has a gradient";
    EXPECT_EQ(frozen[i].second.to_float_vector(), before[i]) << frozen[i].first << " moved";
  }
  const std::vector<double> l = losses(trainer);
  ASSERT_GE(l.size(), 6u);
  for (double v : l) EXPECT_TRUE(std::isfinite(v));
  const double first = (l[0] + l[1]) / 2, last = (l[l.size() - 2] + l.back()) / 2;
  std::string all;
  for (double v : l) all += std::to_string(v) + " ";
  EXPECT_LT(last, first - 0.05) << "the loss did not fall: " << all;
}

TEST(QloraTrainer, Bf16AutocastTrainsAdaptersOnANf4Base) {
  TempDir tmp("qlora_bf16");
  TrainingArguments args = qlora_args(tmp.path());
  args.precision = "bf16";
  // The adapters and the norms keep the recipe's fp32 master weights; the base computes in bf16.
  expect_qlora_trains(args, DType::bf16, DType::f32);
}

TEST(QloraTrainer, PureBf16KeepsNormsAndEmbeddingsInBf16) {
  TempDir tmp("qlora_pure_bf16");
  TrainingArguments args = qlora_args(tmp.path());
  args.precision = "pure_bf16";
  args.gradient_checkpointing = true;
  expect_qlora_trains(args, DType::bf16, DType::bf16);
}

TEST(QloraTrainer, MemoryBreakdownCountsThePackedWeightsAsParameters) {
  TempDir tmp("qlora_breakdown");
  TrainingArguments args = qlora_args(tmp.path());
  args.precision = "pure_bf16";
  args.max_steps = 1;
  Trainer trainer(args);
  int64_t weights = 0;  // the parameters' and the 4-bit buffers' blocks, as the allocator rounds
  for (const auto& [name, p] : trainer.model().named_parameters()) {
    weights += static_cast<int64_t>((p.nbytes() + 511) / 512 * 512);
  }
  int64_t packed = 0;
  for (const Quant4bitWeight* w : weights_4bit(trainer.model())) {
    for (const Tensor* t : {&w->packed, &w->absmax, &w->nested_absmax, &w->nested_code}) {
      if (t->defined()) packed += static_cast<int64_t>((t->nbytes() + 511) / 512 * 512);
    }
  }
  ASSERT_GT(packed, 0);
  ASSERT_EQ(trainer.train(), 0);
  // The 4-bit weights are the model's weights, not the step's temporaries (they were before).
  EXPECT_EQ(trainer.memory_breakdown().bytes(MemoryCategory::parameters), weights + packed);
  EXPECT_LT(trainer.memory_breakdown().bytes(MemoryCategory::temporaries), packed);
}

TEST(QloraTrainer, Fp32RecipeWithAnFp4BaseComputesInFp32) {
  TempDir tmp("qlora_fp32");
  TrainingArguments args = qlora_args(tmp.path());
  args.bnb_4bit_quant_type = "fp4";
  args.bnb_4bit_use_double_quant = false;
  Trainer trainer(args);
  for (auto& [name, module] : trainer.model().named_modules()) {
    const auto* linear = dynamic_cast<const Linear*>(module);
    if (!linear || !is_linear_4bit(*linear)) continue;
    EXPECT_EQ(linear->weight_4bit()->quant_type, Quant4bitType::fp4) << name;
    EXPECT_FALSE(linear->weight_4bit()->nested) << name;
    EXPECT_EQ(linear->compute_dtype(), DType::f32) << name;
  }
  ASSERT_EQ(trainer.train(), 0);
  const std::vector<double> l = losses(trainer);
  EXPECT_LT(l.back(), l.front());
}

// The base is quantized again, deterministically, when a run resumes: steps 3 and 4 after
// resuming from checkpoint-2 repeat the uninterrupted run's losses bit for bit.
TEST(QloraTrainer, ResumedRunRepeatsTheUninterruptedLosses) {
  TempDir tmp("qlora_resume");
  TrainingArguments args = qlora_args(tmp.path());
  args.precision = "bf16";
  args.max_steps = 4;
  args.save_strategy = "steps";
  args.save_steps = 2;
  Trainer full(args);
  ASSERT_EQ(full.train(), 0);
  const std::vector<double> expected = losses(full);
  ASSERT_EQ(expected.size(), 4u);
  TrainingArguments resumed_args = args;
  resumed_args.output_dir = (tmp.path() / "resumed").string();
  resumed_args.resume_from_checkpoint = (tmp.path() / "out" / "checkpoint-2").string();
  Trainer resumed(resumed_args);
  ASSERT_EQ(resumed.train(), 0);
  std::map<int64_t, double> got;  // the resumed history carries the first steps' entries too
  for (const auto& entry : resumed.log_history()) {
    if (entry.contains("loss")) got[entry["step"].get<int64_t>()] = entry["loss"].get<double>();
  }
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3], expected[2]);
  EXPECT_EQ(got[4], expected[3]);
}

TEST(QloraTrainer, BadFourBitOptionsAreRefusedNamingTheOption) {
  TempDir tmp("qlora_bad");
  auto refused = [&](TrainingArguments args, const std::string& expected) {
    try {
      Trainer trainer(args);
      ADD_FAILURE() << "no error for " << expected;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  TrainingArguments args = qlora_args(tmp.path());
  args.use_peft = false;
  refused(args, "load_in_4bit: true without use_peft");
  args = qlora_args(tmp.path());
  args.bnb_4bit_quant_type = "int4";
  refused(args, "bnb_4bit_quant_type");
  args = qlora_args(tmp.path());
  args.bnb_4bit_compute_dtype = "int8";
  refused(args, "bnb_4bit_compute_dtype");
  args = qlora_args(tmp.path());
  args.bnb_4bit_quant_storage = "float64";
  refused(args, "bnb_4bit_quant_storage");
  // A model saved in 4 bits by bitsandbytes: adapters only, as with --load_in_4bit.
  args = qlora_args(tmp.path());
  args.model = std::string(HEADROOM_FIXTURES_DIR) + "/models/llama_tiny_4bit";
  args.use_peft = false;
  args.load_in_4bit = false;
  refused(args, "llama_tiny_4bit/config.json: quantization_config: the model is saved in 4 bits");
}

// HF's names on the command line and in config files, TRL's use_bnb_nested_quant as an alias;
// a bad value is one line and exit 2.
TEST(QloraTrainer, CommandLineAndConfigFileTakeBitsAndBytesNames) {
  TempDir tmp("qlora_cli");
  const TrainingArguments args = qlora_args(tmp.path());
  const std::string common = " --model " + args.model + " --data " + args.data +
                             " --max_seq_length 16 --per_device_train_batch_size 2 --device cpu"
                             " --max_steps 1 --save_strategy no --sample_max_new_tokens 0"
                             " --disable_tqdm --use_peft --output_dir " +
                             (tmp.path() / "out").string();
  const std::string config = (tmp.path() / "run.toml").string();
  std::ofstream(config) << "load_in_4bit = true\nbnb_4bit_quant_type = \"nf4\"\n"
                           "use_bnb_nested_quant = true\nbnb_4bit_compute_dtype = \"bfloat16\"\n";
  const CliRun ok = run_cli("train --config " + config + common);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  const CliRun flags = run_cli(
      "train --load_in_4bit --bnb_4bit_quant_type fp4 --use_bnb_nested_quant "
      "--bnb_4bit_quant_storage bfloat16" +
      common);
  EXPECT_EQ(flags.exit_code, 0) << flags.err;
  expect_usage_error("train --load_in_4bit --bnb_4bit_quant_type int4" + common,
                     "bnb_4bit_quant_type");
  expect_usage_error(
      "train --load_in_4bit --model " + args.model + " --data " + args.data + " --device cpu",
      "load_in_4bit: true without use_peft");
}

}  // namespace
}  // namespace headroom
