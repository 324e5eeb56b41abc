// The `headroom` binary as a user meets it: --help of train and eval, and usage errors on one
// line `headroom: error: ...` with exit code 2, naming the option or file at fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_run.h"
#include "apps/eval_command.h"
#include "apps/train_options.h"
#include "backend/cpu/openmp_spin.h"
#include "io/io_test_helpers.h"
#include "memory/memory_viz_decoder.h"
#include "nn/tiny_text.h"

namespace headroom {
namespace {

using io_test::read_bytes;
using io_test::TempDir;
using io_test::write_bytes;
using test_data::kTinyText;

TEST(HeadroomCli, TrainHelpListsEveryOptionWithItsDefault) {
  const CliRun run = run_cli("train --help");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const TrainingArguments defaults;
  for (const TrainOption& option : train_options()) {
    const std::string snake = std::string("--") + option.name;
    const size_t at = run.out.find(snake);
    ASSERT_NE(at, std::string::npos) << snake;
    const std::string line = run.out.substr(at, run.out.find('\n', at) - at);
    EXPECT_NE(line.find("--" + kebab_case(option.name)), std::string::npos) << line;
    const std::string value = option_value_text(defaults, option);
    if (!value.empty() && value != "\n") {
      EXPECT_NE(line.find("=" + value), std::string::npos) << line;
    }
  }
  EXPECT_NE(run.out.find("--config"), std::string::npos);
  EXPECT_NE(run.out.find("--per_device_train_batch_size,--per-device-train-batch-size INT=8"),
            std::string::npos);
  EXPECT_NE(run.out.find("--bf16 [BOOL]=false"), std::string::npos);
}

TEST(HeadroomCli, TrainUsageErrorsExitTwoOnOneLine) {
  TempDir dir;
  const std::string data = dir.file("data.txt");
  write_bytes(data, "some text\n");
  expect_usage_error("train --no_such_option 3", "unknown option --no_such_option (see --help)");
  // The nearest option name, and no mention of the value that followed (issue 19, defect 13).
  expect_usage_error("train --data " + data + " --memory_limt 1MiB",
                     "unknown option --memory_limt; did you mean --memory_limit? (see --help)");
  expect_usage_error("train --data " + data + " --per-device-train-bach-size=2",
                     "did you mean --per-device-train-batch-size?");
  expect_usage_error("train --data " + data + " --max_steps 5 10",
                     "unexpected argument '10': each option takes at most one value");
  expect_usage_error("eval --model gpt2-tiny --data " + data + " --max_seq_length 8 --devise cpu",
                     "unknown option --devise; did you mean --device?");
  expect_usage_error("train --data " + data + " --per_device_train_batch_size -1",
                     "--per_device_train_batch_size: -1 is not positive");
  expect_usage_error("train --data " + data + " --lr-scheduler-type sawtooth", "sawtooth");
  expect_usage_error("train --data " + data + " --optim sgd_9000", "sgd_9000");
  expect_usage_error("train --data " + data + " --precision fp12", "fp12");
  expect_usage_error("train --data " + data + " --bf16 --fp16", "both true");
  expect_usage_error("train --data " + dir.file("absent.txt"), "absent.txt");
  expect_usage_error("train", "--data is required");
  const std::string config = dir.file("run.json");
  write_bytes(config, "{\"bf16\": true, \"colour\": \"blue\"}");
  expect_usage_error("train --data " + data + " --config " + config, "unknown key 'colour'");
  write_bytes(config, "{\n  \"seed\": 1,\n}");
  expect_usage_error("train --data " + data + " --config " + config, "run.json");
  // What the parsers' libraries throw is named too (issue 19, defects 10 and 11).
  write_bytes(config, "{\"learning_rate\": 8e700}");
  expect_usage_error("train --data " + data + " --config " + config,
                     "run.json: invalid JSON: number overflow");
  const std::string yaml = dir.file("run.yaml");
  write_bytes(yaml, "{}: 1\n");
  expect_usage_error("train --data " + data + " --config " + yaml, "run.yaml: line 1: the key is");
  write_bytes(data, std::string("\x7f"
                                "ELF\x02\x01\x01\0\0",
                                9));
  expect_usage_error(
      "train --model gpt2-tiny --max_steps 1 --output_dir " + dir.file("run") + " --data " + data,
      "data file '" + data + "' is binary");
}

// The GOMP_SPINCOUNT of each program image libgomp started in, in order, as OMP_DISPLAY_ENV has
// libgomp print them.
std::vector<std::string> displayed_spin_counts(const std::string& err) {
  std::vector<std::string> counts;
  const std::string key = "GOMP_SPINCOUNT = '";
  for (size_t at = err.find(key); at != std::string::npos; at = err.find(key, at + 1)) {
    const size_t begin = at + key.size();
    counts.push_back(err.substr(begin, err.find('\'', begin) - begin));
  }
  return counts;
}

// See Note [OpenMP spin-waiting]: with libgomp's own 300000 spins, a run beside other busy
// processes had stretches of 5 s steps instead of 0.1-0.3 s.
// A config file and a model's config.json nested 1e5 deep: one line and exit 2, not a SIGSEGV
// (Note [Bounded JSON]).
TEST(HeadroomCli, DeeplyNestedJsonIsAnErrorNotACrash) {
  TempDir dir;
  const std::string data = dir.file("data.txt");
  write_bytes(data, "some text\n");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string config = dir.file("run.json");
  write_bytes(config, "{\"learning_rate\": " + deep + "}");
  expect_usage_error("train --data " + data + " --config " + config,
                     "run.json: invalid JSON: nested deeper than 512 levels");
  std::filesystem::create_directories(dir.file("model"));
  write_bytes(dir.file("model/config.json"),
              "{\"model_type\": \"gpt2\", \"n_embd\": " + deep + "}");
  expect_usage_error("plan --model " + dir.file("model") + " --max_seq_length 8",
                     "config.json: invalid JSON: nested deeper than 512 levels");
}

TEST(HeadroomCli, RunsLibgompWithAShortSpinUnlessTheUserChoseOne) {
  const std::string display = "OMP_DISPLAY_ENV=verbose";
  const CliRun unset = run_cli("--version", "-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + display);
  ASSERT_EQ(unset.exit_code, 0) << unset.err;
  const std::vector<std::string> counts = displayed_spin_counts(unset.err);
  if (counts.empty()) GTEST_SKIP() << "the OpenMP runtime is not libgomp: " << unset.err;
  EXPECT_EQ(counts.back(), cpu::kOpenMpSpinCount) << unset.err;

  // A user's choice stands, and the program runs once.
  const CliRun spin = run_cli("--version", "-u OMP_WAIT_POLICY GOMP_SPINCOUNT=5 " + display);
  ASSERT_EQ(spin.exit_code, 0) << spin.err;
  EXPECT_EQ(displayed_spin_counts(spin.err), std::vector<std::string>{"5"}) << spin.err;
  const CliRun active = run_cli("--version", "-u GOMP_SPINCOUNT OMP_WAIT_POLICY=active " + display);
  ASSERT_EQ(active.exit_code, 0) << active.err;
  ASSERT_EQ(displayed_spin_counts(active.err).size(), 1u) << active.err;
  EXPECT_NE(displayed_spin_counts(active.err)[0], cpu::kOpenMpSpinCount) << active.err;
  EXPECT_EQ(active.out, unset.out);
}

TEST(HeadroomCli, EvalHelpAndErrors) {
  const CliRun help = run_cli("eval --help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  for (const char* option : {"--model", "--data", "--max_seq_length", "--max-seq-length",
                             "--per_device_eval_batch_size", "--device", "--json"}) {
    EXPECT_NE(help.out.find(option), std::string::npos) << option;
  }
  TempDir dir;
  const std::string data = dir.file("data.txt");
  write_bytes(data, "some text\n");
  expect_usage_error("eval --data " + data + " --max_seq_length 8", "--model");
  expect_usage_error(
      "eval --model gpt2-tiny --data " + dir.file("absent.txt") + " --max_seq_length 8",
      "absent.txt");
  expect_usage_error("eval --model gpt2-tiny --data " + data + " --max-seq-length 0",
                     "--max_seq_length: 0 is not positive");
  // --max_seq_length is optional: the model's context (gpt2-tiny's 256) by default.
  const size_t length_at = help.out.find("--max_seq_length");
  const std::string length_line =
      help.out.substr(length_at, help.out.find('\n', length_at) - length_at);
  EXPECT_EQ(length_line.find("REQUIRED"), std::string::npos) << length_line;
  expect_usage_error("eval --model gpt2-tiny --data " + data,
                     "fewer than one window of 257 (max_seq_length + 1)");
  expect_usage_error("eval --model gpt2-tiny --data " + data + " --max_seq_length 8 --device tpu",
                     "--device");
  expect_usage_error("eval --model gpt2-tiny --data " + data +
                         " --max_seq_length 8 --per-device-eval-batch-size x",
                     "--per_device_eval_batch_size: 'x' is not an integer");
}

// A few steps through the whole pipeline: token cache, DataLoader workers, eval split cut by
// max_eval_samples, selective checkpointing, checkpoints, metrics and the plot; then eval of the
// trained model directory.
TEST(HeadroomCli, TrainsAFewStepsAndEvaluatesTheResult) {
  TempDir dir;
  const std::string data = dir.file("data.txt"), out = dir.file("run");
  std::string text;
  for (int copy = 0; copy < 6; ++copy) text += std::string(kTinyText) + "\n";
  write_bytes(data, text);  // 5% held out: more than 2 eval sequences of 33 tokens
  const CliRun train = run_cli(
      "train --model gpt2-tiny --data " + data + " --output_dir " + out +
      " --max_steps 4 --logging_steps 2 --eval_strategy steps --eval_steps 2"
      " --max_eval_samples 2 --max_seq_length 32 --per_device_train_batch_size 2"
      " --learning_rate 1e-3 --dataloader_num_workers 2 --save_steps 2 --gradient_checkpointing"
      " --gradient_checkpointing_policy selective --sample_max_new_tokens 0 --disable_tqdm");
  ASSERT_EQ(train.exit_code, 0) << train.out << train.err;
  namespace fs = std::filesystem;
  for (const char* file : {"metrics.jsonl", "loss.png", "checkpoint-4", "config.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / file)) << file << "\n" << train.out;
  }
  EXPECT_NE(read_bytes(out + "/metrics.jsonl").find("\"eval_tokens\":64"), std::string::npos)
      << "max_eval_samples 2 x 32 tokens: " << read_bytes(out + "/metrics.jsonl");

  const CliRun eval =
      run_cli("eval --model " + out + " --data " + data + " --max_seq_length 32 --json");
  ASSERT_EQ(eval.exit_code, 0) << eval.out << eval.err;
  const nlohmann::json result = nlohmann::json::parse(eval.out);
  for (const char* key : {"loss", "perplexity", "tokens"}) {
    EXPECT_TRUE(result.contains(key)) << key << " in " << eval.out;
  }
}

// SFT rows from the command line: a packed conversation run with its own template, eval --json
// over the scored tokens of prompt / completion rows, and a strategy TRL lacks refused on one line.
TEST(HeadroomCli, TrainsAndEvaluatesSftRows) {
  TempDir dir;
  const std::string data = dir.file("chat.jsonl"), out = dir.file("sft"),
                    chat_template = dir.file("chat.jinja");
  std::string rows;
  for (int i = 0; i < 16; ++i) {
    rows += nlohmann::json{{"messages",
                            {{{"role", "user"}, {"content", str_cat("hi ", i)}},
                             {{"role", "assistant"}, {"content", str_cat("ok ", i % 4)}}}}}
                .dump() +
            "\n";
  }
  write_bytes(data, rows);
  write_bytes(chat_template,
              "{% for m in messages %}{{ m.role[0] }}:{% generation %}{{ m.content }}"
              "{% endgeneration %}\n{% endfor %}");
  const CliRun train =
      run_cli("train --model gpt2-tiny --data " + data + " --output_dir " + out +
              " --chat_template " + chat_template +
              " --assistant_only_loss --packing --max_length 32 --max_steps 2 --logging_steps 1"
              " --per_device_train_batch_size 2 --sample_max_new_tokens 0 --disable_tqdm");
  ASSERT_EQ(train.exit_code, 0) << train.out << train.err;

  const std::string fixtures = HEADROOM_FIXTURES_DIR;
  const CliRun eval = run_cli("eval --model " + fixtures + "/models/qwen2_sft_tiny --data " +
                              fixtures + "/data/sft_eval/prompt_completion.jsonl --json");
  ASSERT_EQ(eval.exit_code, 0) << eval.out << eval.err;
  // reference.json's prompt_completion: the completions' 46 tokens.
  EXPECT_EQ(nlohmann::json::parse(eval.out)["tokens"], 46) << eval.out;

  const CliRun split =
      run_cli("train --model gpt2-tiny --data " + data + " --packing --packing_strategy bfd_last");
  EXPECT_EQ(split.exit_code, 2);
  EXPECT_NE(split.err.find("packing_strategy: unknown value 'bfd_last'"), std::string::npos)
      << split.err;
}

// Issue 19: eval of a directory with config.json alone scored a random model and exited 0; a
// fresh run into another run's output_dir would take its checkpoints for its own.
TEST(HeadroomCli, EvalNeedsWeightsAndTrainRefusesAnotherRunsCheckpoints) {
  TempDir dir;
  const std::string data = dir.file("data.txt"), out = dir.file("run");
  write_bytes(data, std::string(kTinyText) + "\n" + kTinyText + "\n");
  const std::string train = "train --model gpt2-tiny --data " + data + " --output_dir " + out +
                            " --max_steps 2 --save_steps 2 --max_seq_length 16"
                            " --per_device_train_batch_size 2 --sample_max_new_tokens 0"
                            " --disable_tqdm";
  const CliRun first = run_cli(train);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const std::string config_only = dir.file("config_only");
  std::filesystem::create_directories(config_only);
  std::filesystem::copy_file(out + "/config.json", config_only + "/config.json");
  expect_usage_error("eval --model " + config_only + " --data " + data + " --max_seq_length 16",
                     config_only + "/model.safetensors");
  expect_usage_error(train, "--overwrite_output_dir");
  const CliRun overwritten = run_cli(train + " --overwrite_output_dir");
  EXPECT_EQ(overwritten.exit_code, 0) << overwritten.out << overwritten.err;
}

// --profile writes output_dir/trace.json and prints the op table; --memory_snapshot the pickle.
TEST(HeadroomCli, TrainProfilesAndWritesTheMemorySnapshot) {
  TempDir dir;
  const std::string data = dir.file("data.txt"), out = dir.file("run");
  write_bytes(data, std::string(kTinyText) + "\n" + kTinyText + "\n");
  const std::string snapshot = out + "/memory.pickle";
  const CliRun train = run_cli(
      "train --model gpt2-tiny --data " + data + " --output_dir " + out +
      " --max_steps 3 --max_seq_length 16 --per_device_train_batch_size 2 --save_strategy no"
      " --sample_max_new_tokens 0 --disable_tqdm --profile --profile-wait 0 --profile-warmup 1"
      " --profile-active 2 --memory-snapshot " +
      snapshot);
  ASSERT_EQ(train.exit_code, 0) << train.out << train.err;
  EXPECT_NE(train.out.find("Self CPU time total: "), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("Memory snapshot written to " + snapshot), std::string::npos);
  const nlohmann::json trace = nlohmann::json::parse(read_bytes(out + "/trace.json"));
  std::set<std::string> names;
  for (const nlohmann::json& event : trace.at("traceEvents")) names.insert(event.at("name"));
  for (const char* name : {"ProfilerStep#1", "ProfilerStep#2", "forward", "linear",
                           "LinearBackward0", "optimizer.step", "[memory]"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_FALSE(names.count("ProfilerStep#0")) << "step 0 is the warm-up";
  const PickleValue decoded = memory_test::MemoryVizDecoder(read_bytes(snapshot)).decode();
  EXPECT_FALSE(decoded.at("device_traces").at(size_t{0}).as_list().empty());
}

// A run that dies of out-of-memory still leaves its snapshot, with the failed request in it.
TEST(HeadroomCli, OutOfMemoryStillWritesTheMemorySnapshot) {
  TempDir dir;
  const std::string data = dir.file("data.txt"), snapshot = dir.file("oom.pickle");
  write_bytes(data, std::string(kTinyText) + "\n");
  // Enough for the model, not for its gradients and AdamW's states: --memory_limit, as
  // HEADROOM_MEMORY_LIMIT (issue 19, defect 13).
  const CliRun train =
      run_cli("train --model gpt2-tiny --data " + data + " --output_dir " + dir.file("run") +
                  " --max_steps 2 --max_seq_length 16"
                  " --per_device_train_batch_size 2 --disable_tqdm"
                  " --memory_limit 8MiB --memory_snapshot " +
                  snapshot,
              "-u HEADROOM_MEMORY_LIMIT");
  EXPECT_EQ(train.exit_code, 1) << train.out << train.err;
  EXPECT_NE(train.err.find("out of memory"), std::string::npos) << train.err;
  EXPECT_NE(train.err.find("capacity limit is 8.00 MiB (--memory_limit"), std::string::npos)
      << train.err;
  EXPECT_NE(train.err.find("`headroom plan`"), std::string::npos) << train.err;
  EXPECT_NE(train.err.find("memory snapshot at out-of-memory written to " + snapshot),
            std::string::npos)
      << train.err;
  const PickleValue decoded = memory_test::MemoryVizDecoder(read_bytes(snapshot)).decode();
  bool oom = false;
  for (const PickleValue& entry : decoded.at("device_traces").at(size_t{0}).as_list()) {
    oom = oom || entry.at("action").as_string() == "oom";
  }
  EXPECT_TRUE(oom);
}

// Note [A run that cannot fit is refused before it allocates]: FP8 histories of 1e9 entries
// (179 GiB on this tiny model) are refused by the dry run, one line and exit 2, before anything
// is allocated; without the check the CPU run grew until the kernel's OOM killer ended it.
TEST(HeadroomCli, ARunThatCannotFitIsRefusedBeforeItAllocates) {
  TempDir dir;
  const std::string data = dir.file("data.txt");
  write_bytes(data, std::string(kTinyText) + "\n");
  const std::string run = "train --model gpt2-tiny --data " + data + " --output_dir " +
                          dir.file("run") +
                          " --max_steps 1 --max_seq_length 16 --device cpu"
                          " --per_device_train_batch_size 2 --disable_tqdm --fp8"
                          " --fp8_amax_history_len 1000000000";
  expect_usage_error(run, "the run needs 178.");
  expect_usage_error(run, "GiB of memory at its peak");
  EXPECT_FALSE(std::filesystem::exists(dir.file("run") + "/metrics.jsonl"));
}

TEST(HeadroomCli, EvalReport) {
  const EvalResult result{.loss = 2.0, .perplexity = 7.38905609893065, .tokens = 1024};
  EXPECT_EQ(format_eval_result(result, false), "loss: 2.0000  perplexity: 7.39  tokens: 1024");
  EXPECT_EQ(format_eval_result(result, true),
            "{\"loss\":2.0,\"perplexity\":7.38905609893065,\"tokens\":1024}");
}

}  // namespace
}  // namespace headroom
