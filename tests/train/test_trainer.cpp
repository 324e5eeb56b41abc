// The Trainer on a tiny byte-level GPT-2: loss falls, resumed runs repeat the uninterrupted run's
// losses exactly (also with loader workers), pure_bf16+kahan's compensation buffers, corrupt
// checkpoints are refused (and skipped by "last", as are unfinished saves), save_total_limit,
// metrics.jsonl, stop requests, accumulation equal to the big batch (fp32 and fp16), fp16's
// grad_norm of the unscaled gradients, and the model directory's tokenizer saved with the model.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "core/json_file.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "memory/device_memory.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "train/checkpoint.h"
#include "train/checksums.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::kTinyText;
using test_data::TempDir;
using test_data::tiny_text_gpt2;
using test_data::tiny_training_args;

// The logged training losses by step.
std::map<int64_t, double> step_losses(const Trainer& trainer) {
  std::map<int64_t, double> losses;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("loss")) losses[entry["step"].get<int64_t>()] = entry["loss"].get<double>();
  }
  return losses;
}

std::vector<std::string> checkpoint_names(const std::string& output_dir) {
  std::vector<std::string> names;
  for (const auto& [step, path] : list_checkpoints(output_dir)) {
    names.push_back(fs::path(path).filename().string());
  }
  return names;
}

TEST(Trainer, LossFallsOnTheTinyText) {
  TempDir tmp("trainer_loss_falls");
  TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
  args.max_steps = 30;
  args.save_strategy = "no";
  args.logging_steps = 5;
  args.sample_max_new_tokens = 8;
  Trainer trainer(args);
  EXPECT_EQ(trainer.train(), 0);
  const auto losses = step_losses(trainer);
  ASSERT_EQ(losses.size(), 6u);
  EXPECT_LT(losses.rbegin()->second, 0.7 * losses.begin()->second);
  EXPECT_EQ(trainer.sample().size(), 9u);  // the "\n" prompt and 8 bytes
  EXPECT_TRUE(fs::exists(tmp.path() / "out" / "model.safetensors"));
  const nlohmann::json memory =
      parse_json(read_text_file((tmp.path() / "out" / "memory.json").string()), "memory.json");
  const nlohmann::json& parts = memory.at("breakdown");
  // Note [Memory breakdown at the peak]: block sizes (multiples of 512 B) per category.
  int64_t weights = 0;
  for (const Tensor& p : trainer.model().parameters()) {
    weights += static_cast<int64_t>((p.nbytes() + 511) / 512 * 512);
  }
  EXPECT_EQ(parts.at("parameters").get<int64_t>(), weights);
  EXPECT_LE(parts.at("gradients").get<int64_t>(), weights);
  EXPECT_LE(parts.at("optimizer_states").get<int64_t>(), 2 * weights);
  int64_t sum = 0;
  for (const char* key :
       {"parameters", "gradients", "optimizer_states", "activations", "temporaries"}) {
    sum += parts.at(key).get<int64_t>();
  }
  EXPECT_EQ(sum, parts.at("peak_allocated_bytes").get<int64_t>());
  EXPECT_EQ(sum + parts.at("allocator_slack").get<int64_t>(),
            parts.at("peak_reserved_bytes").get<int64_t>());
}

// Steps 3 and 4 after resuming from checkpoint-2 equal the uninterrupted run's to the last bit:
// weights, AdamW moments, schedule (in its 2 warmup steps), generator (dropout 0.1) and data
// position all come back; with accumulation 2, and `num_workers` data loader workers.
void expect_resume_repeats_losses(const std::string& precision, int64_t num_workers = 0,
                                  const std::string& optim = "adamw_torch") {
  TempDir tmp(str_cat("trainer_resume_", precision, "_", num_workers, "_", optim));
  TrainingArguments args = tiny_training_args(tmp.path());
  args.precision = precision;
  args.optim = optim;
  args.gradient_accumulation_steps = 2;
  args.per_device_train_batch_size = 2;
  args.dataloader_num_workers = num_workers;
  Trainer full(args);
  ASSERT_EQ(full.train(), 0);
  const auto expected = step_losses(full);
  ASSERT_EQ(expected.size(), 4u);

  TrainingArguments resumed_args = args;
  resumed_args.output_dir = (tmp.path() / "resumed").string();
  resumed_args.resume_from_checkpoint = (tmp.path() / "out" / "checkpoint-2").string();
  Trainer resumed(resumed_args);
  ASSERT_EQ(resumed.train(), 0);
  const auto actual = step_losses(resumed);
  ASSERT_EQ(actual.size(), 4u) << "the checkpoint's log_history carries steps 1-2";
  for (int64_t step = 1; step <= 4; ++step) {
    EXPECT_EQ(actual.at(step), expected.at(step)) << precision << " step " << step;
  }
  EXPECT_EQ(resumed.model().parameters()[0].to_float_vector(),
            full.model().parameters()[0].to_float_vector());
  EXPECT_EQ(fs::exists(tmp.path() / "out" / "checkpoint-2" / "scaler.json"), precision == "fp16");
}

TEST(Trainer, ResumedRunRepeatsTheUninterruptedLossesFp32) { expect_resume_repeats_losses("fp32"); }
TEST(Trainer, ResumedRunRepeatsTheUninterruptedLossesBf16) { expect_resume_repeats_losses("bf16"); }
// The GradScaler's state (scaler.json) and AdamW's stochastic-rounding stream come back too.
TEST(Trainer, ResumedRunRepeatsTheUninterruptedLossesFp16) { expect_resume_repeats_losses("fp16"); }
TEST(Trainer, ResumedRunRepeatsTheUninterruptedLossesPureBf16) {
  expect_resume_repeats_losses("pure_bf16");
}
// bitsandbytes' 8-bit states of bf16 weights (issue 21): codes and absmax come back.
TEST(Trainer, ResumedRunRepeatsTheUninterruptedLossesPureBf16AdamW8bit) {
  expect_resume_repeats_losses("pure_bf16", 0, "adamw_8bit");
}

// pure_bf16 with bitsandbytes' 8-bit optimizers (issue 21): bf16 weights and gradients, one byte
// per state per parameter where a tensor has 4096 elements or more; the tiny GPT-2 learns.
TEST(Trainer, PureBf16With8BitStatesLearnsTheTinyText) {
  for (const char* optim : {"adamw_8bit", "lion_8bit"}) {
    SCOPED_TRACE(optim);
    TempDir tmp(str_cat("trainer_pure_bf16_", optim));
    TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
    args.precision = "pure_bf16";
    args.optim = optim;
    if (args.optim == "lion_8bit") args.learning_rate = 2e-3;  // Lion wants a smaller lr
    args.max_steps = 30;
    args.logging_steps = 5;
    args.save_strategy = "no";
    Trainer trainer(args);
    EXPECT_EQ(trainer.train(), 0);
    EXPECT_EQ(trainer.optimizer().name(), optim);
    const auto losses = step_losses(trainer);
    ASSERT_EQ(losses.size(), 6u);
    EXPECT_LT(losses.rbegin()->second, 0.8 * losses.begin()->second);
    int64_t eight_bit = 0;
    for (const NamedTensor& state : trainer.optimizer().state_dict().tensors) {
      eight_bit += state.second.dtype() == DType::u8 ? 1 : 0;
    }
    EXPECT_GT(eight_bit, 0) << "the embeddings have 8-bit states";
    for (const Tensor& p : trainer.model().parameters()) EXPECT_EQ(p.dtype(), DType::bf16);
  }
}

// Workers prepare batches ahead of the step: the checkpoint holds the position of the batches
// consumed, not of those prefetched.
TEST(Trainer, ResumedRunRepeatsTheUninterruptedLossesWithLoaderWorkers) {
  expect_resume_repeats_losses("fp32", /*num_workers=*/2);
}
// The Kahan compensation buffers are saved in the checkpoint and come back.
TEST(Trainer, ResumedRunRepeatsTheUninterruptedLossesPureBf16Kahan) {
  expect_resume_repeats_losses("pure_bf16+kahan");
}

// What an optimizer step leaves allocated beside the weights: the optimizer's state, the
// gradients being freed by zero_grad.
size_t state_bytes_after_one_step(const TrainingArguments& args) {
  Trainer trainer(args);
  const size_t before = memory_allocated(kCPU);
  trainer.step();
  return memory_allocated(kCPU) - before;
}

size_t block_bytes(const Tensor& t) { return (t.nbytes() + 511) / 512 * 512; }

// Note [Precision recipes] through the one option: pure_bf16+kahan's AdamW keeps bf16 moments and
// a bf16 compensation buffer per parameter, 6 bytes per parameter beside the bf16 weights and
// gradients (10 in all); pure_bf16 has no buffer (8).
TEST(Trainer, PureBf16KahanKeepsABf16CompensationBufferPerParameter) {
  TempDir tmp("trainer_kahan_state");
  TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
  args.save_strategy = "no";
  args.precision = "pure_bf16+kahan";
  Trainer trainer(args);
  EXPECT_EQ(trainer.recipe().name(), "pure_bf16+kahan");
  EXPECT_EQ(trainer.recipe().adamw_bytes_per_parameter(), 10);
  trainer.step();
  const auto* adamw = dynamic_cast<const AdamW*>(&trainer.optimizer());
  ASSERT_NE(adamw, nullptr);
  EXPECT_EQ(adamw->name(), "adamw_bf16");
  EXPECT_TRUE(adamw->options().kahan_summation);
  size_t states = 0, weights = 0;
  const auto& groups = adamw->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& param = groups[g].params[i].second;
      const AdamWState& state = adamw->state(g, i);
      ASSERT_TRUE(state.compensation.defined()) << g << " " << i;
      EXPECT_EQ(state.compensation.dtype(), DType::bf16);
      EXPECT_EQ(state.compensation.shape(), param.shape());
      EXPECT_EQ(state.exp_avg.dtype(), DType::bf16);
      EXPECT_EQ(param.dtype(), DType::bf16);
      states += block_bytes(state.exp_avg) + block_bytes(state.exp_avg_sq) +
                block_bytes(state.compensation);
      weights += block_bytes(param);
    }
  }
  // Moments and buffer are each the size of the bf16 weights, allocated by the first step.
  EXPECT_EQ(states, 3 * weights);
  EXPECT_EQ(state_bytes_after_one_step(args), states);
  args.precision = "pure_bf16";
  EXPECT_EQ(state_bytes_after_one_step(args), 2 * weights);
}

// The Kahan update is AdamW's: another optimizer refuses the recipe instead of rounding.
TEST(Trainer, PureBf16KahanWithAnotherOptimizerIsRefused) {
  TempDir tmp("trainer_kahan_sgd");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.precision = "pure_bf16+kahan";
  args.optim = "sgd";
  try {
    Trainer trainer(args);
    ADD_FAILURE() << "pure_bf16+kahan with sgd was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Kahan"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sgd"), std::string::npos) << e.what();
  }
}

class CorruptCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    args_ = tiny_training_args(tmp_.path());
    Trainer trainer(args_);
    ASSERT_EQ(trainer.train(), 0);
    ASSERT_EQ(checkpoint_names(args_.output_dir),
              (std::vector<std::string>{"checkpoint-2", "checkpoint-4"}));
    newest_ = tmp_.path() / "out" / "checkpoint-4";
  }

  // The error of resuming from the newest checkpoint; it must name `file`.
  void expect_refused(const std::string& file) {
    TrainingArguments args = args_;
    args.resume_from_checkpoint = newest_.string();
    Trainer trainer(args);
    try {
      trainer.train();
      ADD_FAILURE() << "a checkpoint with a bad " << file << " was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }

  // Rewrites a file and the checksum of it, so that what is tested is the file's own check.
  void write(const std::string& file, const std::string& text) {
    std::ofstream(newest_ / file, std::ios::trunc) << text;
    write_checkpoint_checksums(newest_.string());
  }

  TempDir tmp_{"trainer_corrupt"};
  TrainingArguments args_;
  fs::path newest_;
};

TEST_F(CorruptCheckpoint, TruncatedWeightsAreRefusedNamingTheFile) {
  fs::resize_file(newest_ / "model.safetensors", fs::file_size(newest_ / "model.safetensors") / 2);
  write_checkpoint_checksums(newest_.string());
  expect_refused("model.safetensors");
}

TEST_F(CorruptCheckpoint, MissingFileIsRefusedNamingIt) {
  fs::remove(newest_ / "scheduler.json");
  expect_refused("scheduler.json");
}

TEST_F(CorruptCheckpoint, BadJsonIsRefusedNamingTheFile) {
  write("trainer_state.json", "{\"global_step\": 6, ");
  expect_refused("trainer_state.json");
}

TEST_F(CorruptCheckpoint, WrongTensorShapeIsRefusedNamingTheFile) {
  SafetensorsFile optimizer((newest_ / "optimizer.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : optimizer.names()) {
    Tensor t = optimizer.load(name);
    tensors.emplace_back(name, tensors.empty() ? Tensor::zeros({3}) : t);
  }
  const auto metadata = optimizer.metadata();
  save_safetensors((newest_ / "optimizer.safetensors.new").string(), tensors, metadata);
  fs::rename(newest_ / "optimizer.safetensors.new", newest_ / "optimizer.safetensors");
  write_checkpoint_checksums(newest_.string());
  expect_refused("optimizer.safetensors");
}

TEST_F(CorruptCheckpoint, LastSkipsACorruptNewestCheckpoint) {
  write("rng_state.json", "not json");
  TrainingArguments args = args_;
  args.resume_from_checkpoint = "last";
  args.max_steps = 3;
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  EXPECT_EQ(trainer.global_step(), 3);
  const auto losses = step_losses(trainer);
  EXPECT_EQ(losses.size(), 3u);  // steps 1-2 from checkpoint-2's log_history, then step 3
}

// A save interrupted before its rename leaves tmp-checkpoint-STEP-PID behind
// (train/checkpoint.h): "last" resumes from the newest real checkpoint, and save_total_limit
// neither counts nor deletes the leftover. Here the leftover is whole and names step 6, so that
// resuming from it would show: steps 7-8 only.
TEST_F(CorruptCheckpoint, LastAndRotationIgnoreAnUnfinishedSave) {
  const fs::path leftover = tmp_.path() / "out" / "tmp-checkpoint-6-1";
  fs::copy(newest_, leftover);
  nlohmann::ordered_json state =
      nlohmann::ordered_json::parse(read_text_file((leftover / "trainer_state.json").string()));
  state["global_step"] = 6;
  std::ofstream(leftover / "trainer_state.json", std::ios::trunc) << state.dump();
  TrainingArguments args = args_;
  args.resume_from_checkpoint = "last";
  args.max_steps = 8;
  args.save_total_limit = 2;
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  const auto losses = step_losses(trainer);
  ASSERT_EQ(losses.size(), 8u) << "steps 1-4 from checkpoint-4's log_history, then 5-8";
  EXPECT_TRUE(losses.count(5));
  EXPECT_EQ(checkpoint_names(args.output_dir),
            (std::vector<std::string>{"checkpoint-6", "checkpoint-8"}));
  EXPECT_TRUE(fs::exists(leftover / "model.safetensors")) << "rotation deleted the leftover";
}

TEST(Trainer, LastWithoutCheckpointsIsAnError) {
  TempDir tmp("trainer_no_checkpoint");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.resume_from_checkpoint = "last";
  Trainer trainer(args);
  EXPECT_THROW(trainer.train(), ValueError);
}

TEST(Trainer, SaveTotalLimitKeepsTheNewestCheckpoints) {
  TempDir tmp("trainer_save_limit");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.save_steps = 1;
  args.save_total_limit = 2;
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  EXPECT_EQ(checkpoint_names(args.output_dir),
            (std::vector<std::string>{"checkpoint-3", "checkpoint-4"}));
  for (const auto& entry : fs::directory_iterator(args.output_dir)) {
    EXPECT_EQ(entry.path().filename().string().rfind("tmp-", 0), std::string::npos)
        << "a temporary checkpoint directory was left behind";
  }
}

TEST(Trainer, MetricsJsonlHasOneEntryPerLoggedStepAndEval) {
  TempDir tmp("trainer_metrics");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.logging_steps = 2;
  args.eval_strategy = "steps";
  args.eval_steps = 2;
  args.save_strategy = "no";
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  std::ifstream in(tmp.path() / "out" / "metrics.jsonl");
  std::vector<nlohmann::json> train_entries, eval_entries;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json entry = parse_json(line, "metrics.jsonl");
    (entry.contains("eval_loss") ? eval_entries : train_entries).push_back(entry);
  }
  ASSERT_EQ(train_entries.size(), 2u);
  for (const nlohmann::json& entry : train_entries) {
    for (const char* key : {"step", "epoch", "loss", "lr", "grad_norm", "loss_scale",
                            "tokens_per_s", "peak_allocated_bytes", "peak_reserved_bytes"}) {
      EXPECT_TRUE(entry.contains(key)) << key << " in " << entry.dump();
    }
    EXPECT_GT(entry["peak_allocated_bytes"].get<int64_t>(), 0);
    EXPECT_LE(entry["peak_allocated_bytes"].get<int64_t>(),
              entry["peak_reserved_bytes"].get<int64_t>());
  }
  EXPECT_EQ(train_entries[0]["step"], 2);
  ASSERT_EQ(eval_entries.size(), 2u);
  EXPECT_EQ(eval_entries[1]["step"], 4);
  EXPECT_NEAR(eval_entries[1]["eval_perplexity"].get<double>(),
              std::exp(eval_entries[1]["eval_loss"].get<double>()), 1e-9);
}

// The eval losses of a run, by step.
std::vector<std::pair<int64_t, double>> eval_losses(const Trainer& trainer) {
  std::vector<std::pair<int64_t, double>> losses;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("eval_loss")) {
      losses.emplace_back(entry["step"].get<int64_t>(), entry["eval_loss"].get<double>());
    }
  }
  return losses;
}

TEST(Trainer, EvalLossTargetEndsTheRunAtTheFirstEvalAtOrBelowIt) {
  TempDir tmp("trainer_eval_target");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.max_steps = 8;
  args.eval_strategy = "steps";
  args.eval_steps = 1;
  args.save_strategy = "no";
  std::vector<std::pair<int64_t, double>> full;
  {
    Trainer trainer(args);
    ASSERT_EQ(trainer.train(), 0);
    full = eval_losses(trainer);
  }
  ASSERT_EQ(full.size(), 8u);
  // The target is the fourth eval's loss; the run ends at the first eval at or below it.
  args.eval_loss_target = full[3].second;
  int64_t expected_step = 0;
  for (const auto& [step, loss] : full) {
    if (loss <= args.eval_loss_target) {
      expected_step = step;
      break;
    }
  }
  ASSERT_GT(expected_step, 0);
  ASSERT_LT(expected_step, 8) << "the loss must fall for this test to mean anything";
  fs::remove_all(args.output_dir);
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  EXPECT_EQ(trainer.global_step(), expected_step);
  const std::vector<std::pair<int64_t, double>> stopped = eval_losses(trainer);
  ASSERT_EQ(stopped.size(), static_cast<size_t>(expected_step));
  for (size_t i = 0; i < stopped.size(); ++i) EXPECT_EQ(stopped[i], full[i]) << i;
  EXPECT_EQ(trainer.log_history().back().value("eval_loss_target_reached", false), true);
  EXPECT_TRUE(fs::exists(fs::path(args.output_dir) / "model.safetensors"))
      << "the model is saved as at the end of a full run";
}

TEST(Trainer, StopRequestSavesACheckpointAndReturns128PlusTheSignal) {
  for (int signal_number : {SIGINT, SIGTERM}) {
    TempDir tmp("trainer_stop");
    TrainingArguments args = tiny_training_args(tmp.path());
    Trainer trainer(args);
    request_training_stop(signal_number);  // what the SIGINT / SIGTERM handler does
    EXPECT_EQ(trainer.train(), 128 + signal_number);
    EXPECT_EQ(trainer.global_step(), 1);
    EXPECT_EQ(training_stop_requested(), 0);
    EXPECT_EQ(checkpoint_names(args.output_dir), std::vector<std::string>{"checkpoint-1"});
    args.resume_from_checkpoint = "last";
    Trainer resumed(args);
    EXPECT_EQ(resumed.train(), 0);
    EXPECT_EQ(resumed.global_step(), 4);
  }
}

// Batch 4 x accumulation 1 and batch 2 x accumulation 2 see the same windows in the same order
// (no dropout): the fp32 losses and weights agree to summation order.
TEST(Trainer, AccumulationMatchesTheBigBatch) {
  TempDir tmp("trainer_accumulation");
  TrainingArguments big = tiny_training_args(tmp.path(), 0.0);
  big.save_strategy = "no";
  TrainingArguments accumulated = big;
  accumulated.per_device_train_batch_size = 2;
  accumulated.gradient_accumulation_steps = 2;
  accumulated.output_dir = (tmp.path() / "accumulated").string();
  Trainer a(big), b(accumulated);
  ASSERT_EQ(a.train(), 0);
  ASSERT_EQ(b.train(), 0);
  const auto la = step_losses(a), lb = step_losses(b);
  ASSERT_EQ(la.size(), lb.size());
  for (const auto& [step, loss] : la) EXPECT_NEAR(lb.at(step), loss, 1e-5 * loss) << step;
  const auto pa = a.model().parameters(), pb = b.model().parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].to_float_vector(), vb = pb[i].to_float_vector();
    for (size_t j = 0; j < va.size(); ++j) ASSERT_NEAR(va[j], vb[j], 1e-5) << i << " " << j;
  }
}

// As HF's Trainer saves its tokenizer with the model: output_dir and every checkpoint hold the
// model directory's tokenizer files, so `headroom eval --model output_dir` (load_tokenizer)
// tokenizes as the run did instead of falling back to bytes.
TEST(Trainer, SavesTheModelDirectorysTokenizerWithTheModel) {
  TempDir tmp("trainer_tokenizer");
  TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
  const fs::path model_dir(args.model);
  GPT2Config config = tiny_text_gpt2();
  config.n_positions = 16;
  config.vocab_size = 1536;  // the fixture's 1500 tokens
  config.bos_token_id = std::nullopt;
  config.eos_token_id = {};
  write_hf_config(model_dir.string(), config);
  const fs::path fixtures = fs::path(HEADROOM_FIXTURES_DIR) / "tokenizer" / "gpt2_bpe";
  fs::copy_file(fixtures / "tokenizer.json", model_dir / "tokenizer.json");
  std::ofstream(model_dir / "tokenizer_config.json") << "{\"tokenizer_class\": \"GPT2Tokenizer\"}";
  args.max_steps = 2;
  Trainer trainer(args);
  ASSERT_EQ(trainer.tokenizer().kind(), "gpt2_bpe");
  ASSERT_EQ(trainer.train(), 0);

  const std::unique_ptr<Tokenizer> original = load_tokenizer(model_dir.string());
  const std::string text = std::string(kTinyText).substr(0, 200);
  const fs::path out(args.output_dir);
  for (const fs::path& dir : {out, out / "checkpoint-2"}) {
    SCOPED_TRACE(dir.string());
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      EXPECT_EQ(read_text_file((dir / file).string()), read_text_file((model_dir / file).string()))
          << file;
    }
    const std::unique_ptr<Tokenizer> saved = load_tokenizer(dir.string());
    EXPECT_EQ(saved->kind(), original->kind());
    EXPECT_EQ(saved->fingerprint(), original->fingerprint());
    EXPECT_EQ(saved->encode(text), original->encode(text));
  }
}

// The logged grad_norm of step 1, and the norm of the true gradients of the same step computed
// by hand on a twin trainer (same seed: the same weights and first batch): the recipe's forward,
// backward of the loss times `loss_scale`, then the fp32 gradients' norm in double divided by
// loss_scale (a power of two: exact).
struct StepOneNorms {
  double logged = 0.0;
  double reference = 0.0;
  double loss_scale = 0.0;  // logged after the step
};

StepOneNorms step_one_grad_norms(TrainingArguments args, double loss_scale) {
  args.max_steps = 1;
  args.warmup_steps = 0;
  args.save_strategy = "no";
  StepOneNorms norms;
  {
    Trainer trainer(args);
    EXPECT_EQ(trainer.train(), 0);
    const nlohmann::ordered_json& logged = trainer.log_history().at(0);
    EXPECT_EQ(logged.at("step"), 1);
    norms.logged = logged.at("grad_norm").get<double>();
    norms.loss_scale = logged.at("loss_scale").get<double>();
  }
  args.output_dir += "_twin";
  Trainer twin(args);
  const TokenBatch batch = twin.data().next_batch();
  Tensor loss;
  {
    const std::optional<DType> dtype = twin.recipe().autocast_dtype;
    Autocast region(DeviceType::cpu, dtype, dtype.has_value());
    loss = twin.model().loss(batch.input_ids, batch.targets);
  }
  backward(scale(loss, loss_scale));
  double squares = 0.0;
  for (const Tensor& p : twin.model().parameters()) {
    EXPECT_EQ(p.grad().dtype(), DType::f32);
    for (float g : p.grad().to_float_vector()) squares += static_cast<double>(g) * g;
  }
  norms.reference = std::sqrt(squares) / loss_scale;
  return norms;
}

// Under fp16 the gradients hold loss x 2^16 until unscale_; clipping and the logged grad_norm must
// see the true ones (HF: the norm before clipping, after unscaling). A norm of the scaled
// gradients would be 65536 times the reference; max_grad_norm is below the norm, so the step
// clips, and it is not skipped (the scale stays 2^16).
TEST(Trainer, Fp16GradNormIsTheNormOfTheUnscaledGradients) {
  TempDir tmp("trainer_fp16_grad_norm");
  TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
  args.precision = "fp16";
  args.max_grad_norm = 0.1;
  const StepOneNorms fp16 = step_one_grad_norms(args, 65536.0);
  EXPECT_EQ(fp16.loss_scale, 65536.0);
  // The same arithmetic but for the order of the fp32 sums of squares (2e-8 apart here).
  EXPECT_NEAR(fp16.logged, fp16.reference, 1e-5 * fp16.reference);
  EXPECT_GT(fp16.logged, args.max_grad_norm);
  // And it is the fp32 recipe's norm on the same batch to f16's rounding of the activations and
  // weight casts, whose unit roundoff is 2^-11 = 4.9e-4 (3e-5 apart here).
  args.precision = "fp32";
  const StepOneNorms fp32 = step_one_grad_norms(args, 1.0);
  EXPECT_NEAR(fp32.logged, fp32.reference, 1e-5 * fp32.reference);
  EXPECT_NEAR(fp16.logged, fp32.logged, 1e-3 * fp32.logged);
}

// Every parameter's values, one after another.
std::vector<float> all_weights(Trainer& trainer) {
  std::vector<float> values;
  for (const Tensor& p : trainer.model().parameters()) {
    const std::vector<float> v = p.to_float_vector();
    values.insert(values.end(), v.begin(), v.end());
  }
  return values;
}

// fp16 at the Trainer level: batch 4 x accumulation 1 and batch 2 x accumulation 2 see the same
// windows (as in AccumulationMatchesTheBigBatch), each micro-batch's loss / 2 is scaled by 2^16,
// the gradients are unscaled and clipped once per step, and no step overflows. Unlike fp32 they
// cannot agree to summation order: autocast rounds each micro-batch's weight gradients to f16
// (2^-11 relative) before they are summed in fp32, where the big batch rounds the sum once, and
// Adam's first steps (update ~ lr * sign(g)) turn that into up to a step of lr for elements whose
// gradient is near zero. Tolerances: the logged losses within 1e-5 relative (6e-7 here), and the
// weights' difference within 2% of the update's norm (0.4% here, the worst element 1e-3 with
// lr 3e-3).
TEST(Trainer, Fp16AccumulationMatchesTheBigBatch) {
  TempDir tmp("trainer_fp16_accumulation");
  TrainingArguments big = tiny_training_args(tmp.path(), 0.0);
  big.save_strategy = "no";
  big.precision = "fp16";
  big.max_grad_norm = 1.0;
  TrainingArguments accumulated = big;
  accumulated.per_device_train_batch_size = 2;
  accumulated.gradient_accumulation_steps = 2;
  accumulated.output_dir = (tmp.path() / "accumulated").string();
  Trainer a(big), b(accumulated);
  const std::vector<float> start = all_weights(a);
  ASSERT_EQ(all_weights(b), start);
  ASSERT_EQ(a.train(), 0);
  ASSERT_EQ(b.train(), 0);
  const auto la = step_losses(a), lb = step_losses(b);
  ASSERT_EQ(la.size(), lb.size());
  for (const auto& [step, loss] : la) {
    EXPECT_NEAR(lb.at(step), loss, 1e-5 * loss) << step;
  }
  for (const Trainer* t : {&a, &b}) {
    for (const auto& entry : t->log_history()) {
      if (entry.contains("loss_scale")) {
        EXPECT_EQ(entry["loss_scale"].get<double>(), 65536.0);
      }
    }
  }
  const std::vector<float> wa = all_weights(a), wb = all_weights(b);
  double update = 0.0, difference = 0.0;
  for (size_t i = 0; i < start.size(); ++i) {
    update += std::pow(static_cast<double>(wa[i]) - start[i], 2);
    difference += std::pow(static_cast<double>(wa[i]) - wb[i], 2);
  }
  ASSERT_GT(update, 0.0);
  EXPECT_LT(std::sqrt(difference), 0.02 * std::sqrt(update));
}

TEST(Trainer, BadArgumentsAreValueErrorsNamingTheOption) {
  TempDir tmp("trainer_bad_args");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.max_seq_length = 17;
  try {
    Trainer trainer(args);
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("max_seq_length"), std::string::npos) << e.what();
  }
  args = tiny_training_args(tmp.path());
  args.eval_strategy = "epoch";
  EXPECT_THROW(Trainer trainer(args), ValueError);
  args = tiny_training_args(tmp.path());
  args.model = (tmp.path() / "nowhere").string();
  EXPECT_THROW(Trainer trainer(args), ValueError);
}

}  // namespace
}  // namespace headroom
