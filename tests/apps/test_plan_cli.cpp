// `headroom plan` as a user meets it: the same options as train, its figures equal to what
// `headroom train` then logs in metrics.jsonl, the search and inference reports, and errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/cli_run.h"
#include "core/error.h"
#include "apps/train_options.h"
#include "io/io_test_helpers.h"
#include "memory/memory_viz_decoder.h"
#include "nn/tiny_text.h"

namespace headroom {
namespace {

using io_test::read_bytes;
using io_test::TempDir;
using io_test::write_bytes;

// Trains with `options` for 3 steps and plans them; the plan's peaks must be the logged ones.
void expect_plan_equals_train(const std::string& options) {
  SCOPED_TRACE(options);
  TempDir dir;
  const std::string data = dir.file("data.txt"), out = dir.file("run");
  std::string text;
  for (int copy = 0; copy < 40; ++copy) text += std::string(test_data::kTinyText) + "\n";
  write_bytes(data, text);
  const CliRun train = run_cli("train" + options + " --data " + data + " --output_dir " + out +
                               " --max_steps 3 --logging_steps 1 --save_strategy no"
                               " --sample_max_new_tokens 0 --disable_tqdm");
  ASSERT_EQ(train.exit_code, 0) << train.out << train.err;
  std::istringstream lines(read_bytes(out + "/metrics.jsonl"));
  nlohmann::json last;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json entry = nlohmann::json::parse(line);
    if (entry.contains("peak_allocated_bytes")) last = entry;
  }
  ASSERT_FALSE(last.is_null());

  // No --data: the plan's batches are synthetic.
  const CliRun plan = run_cli("plan" + options + " --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  const nlohmann::json predicted = nlohmann::json::parse(plan.out);
  EXPECT_EQ(predicted["peak_allocated_bytes"], last["peak_allocated_bytes"]);
  EXPECT_EQ(predicted["peak_reserved_bytes"], last["peak_reserved_bytes"]);
  int64_t sum = 0;
  for (const auto& [name, bytes] : predicted["breakdown"].items()) sum += bytes.get<int64_t>();
  EXPECT_EQ(sum, predicted["peak_reserved_bytes"].get<int64_t>());
  EXPECT_EQ(predicted["device"], "cpu");
  EXPECT_TRUE(predicted["fits"].is_null());  // no memory named

  // memory.json of the run splits the same peak the same way.
  const nlohmann::json memory = nlohmann::json::parse(read_bytes(out + "/memory.json"));
  EXPECT_EQ(memory["breakdown"]["peak_allocated_bytes"], predicted["peak_allocated_bytes"]);
}

// Issue 24: plan's --help listed --data as required and --output_dir, which plan does not read.
// It lists the options a dry run reads, names the others in its footer, and accepts them.
TEST(HeadroomPlanCli, HelpListsTheOptionsThePlanReads) {
  const CliRun help = run_cli("plan --help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  const size_t footer_at = help.out.find("Accepted and ignored");
  ASSERT_NE(footer_at, std::string::npos) << help.out;
  const std::string listed = help.out.substr(0, footer_at), footer = help.out.substr(footer_at);
  for (const TrainOption& option : train_options()) {
    const std::string name = std::string("--") + option.name;
    const bool in_list = listed.find("  " + name + " ") != std::string::npos ||
                         listed.find("  " + name + ",") != std::string::npos;
    EXPECT_EQ(in_list, read_by_plan(option)) << name;
    EXPECT_EQ(footer.find(name + ",") != std::string::npos ||
                  footer.find(name + ".") != std::string::npos,
              !read_by_plan(option))
        << name;
  }
  EXPECT_EQ(listed.find("required"), std::string::npos) << listed;
  for (const char* unread : {"--output_dir", "--learning_rate", "--save_steps"}) {
    EXPECT_FALSE(read_by_plan(*find_train_option(unread + 2))) << unread;
  }
  for (const char* read : {"--model", "--data", "--per_device_train_batch_size", "--optim",
                           "--gradient_checkpointing", "--memory_snapshot", "--eval_strategy"}) {
    EXPECT_TRUE(read_by_plan(*find_train_option(read + 2))) << read;
  }

  // A train command line plans as it is (a text --data is not read: its windows are synthetic).
  const CliRun plan = run_cli(
      "plan --json --data absent.txt --output_dir absent --learning_rate 1e-3 --save_steps 7");
  ASSERT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  EXPECT_TRUE(nlohmann::json::parse(plan.out).contains("peak_allocated_bytes")) << plan.out;
}

TEST(HeadroomPlanCli, PredictsWhatTrainLogs) {
  expect_plan_equals_train(
      " --model llama-tiny --max_seq_length 64 --per_device_train_batch_size 4"
      " --gradient_accumulation_steps 2 --bf16 --optim adamw_8bit --gradient_checkpointing"
      " --gradient_checkpointing_policy every_2 --device cpu");
}

// The allocator settings of the environment hold for the dry run as for the run: both
// processes read HEADROOM_ALLOC_CONF.
TEST(HeadroomPlanCli, PredictsWhatTrainLogsUnderAllocatorSettings) {
  const std::string options =
      " --model gpt2-tiny --max_seq_length 200 --per_device_train_batch_size 6 --fp16"
      " --eval_strategy steps --eval_steps 1 --max_eval_samples 6 --device cpu";
  const CliRun defaults = run_cli("plan" + options + " --json");
  ASSERT_EQ(defaults.exit_code, 0) << defaults.err;
  ::setenv("HEADROOM_ALLOC_CONF", "max_split_size_mb:21,roundup_power2_divisions:2", 1);
  expect_plan_equals_train(options);
  const CliRun rounded = run_cli("plan" + options + " --json");
  ::unsetenv("HEADROOM_ALLOC_CONF");
  // The settings change the figures, so the test above is not the default case again.
  EXPECT_NE(nlohmann::json::parse(rounded.out)["peak_allocated_bytes"],
            nlohmann::json::parse(defaults.out)["peak_allocated_bytes"]);
}

// pure_bf16+kahan through --precision: the plan equals the run, names the recipe and holds its
// bf16 compensation buffer (Note [Precision recipes]: optimizer states of 6 bytes per parameter,
// pure_bf16's 4 and a buffer the size of either moment); the search offers it with AdamW only.
TEST(HeadroomPlanCli, PlansPureBf16WithKahanSummation) {
  const std::string model =
      " --model gpt2-tiny --max_seq_length 64 --per_device_train_batch_size 2";
  expect_plan_equals_train(model + " --precision pure_bf16+kahan --device cpu");
  const CliRun kahan = run_cli("plan" + model + " --precision pure_bf16+kahan --device cpu --json");
  const CliRun plain = run_cli("plan" + model + " --precision pure_bf16 --device cpu --json");
  ASSERT_EQ(kahan.exit_code, 0) << kahan.err;
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const nlohmann::json with = nlohmann::json::parse(kahan.out);
  const nlohmann::json without = nlohmann::json::parse(plain.out);
  EXPECT_EQ(with["precision"], "pure_bf16+kahan");
  EXPECT_EQ(with["formula"]["optimizer_bytes_per_parameter"], 6.0);
  EXPECT_EQ(without["formula"]["optimizer_bytes_per_parameter"], 4.0);
  EXPECT_EQ(2 * with["breakdown"]["optimizer_states"].get<int64_t>(),
            3 * without["breakdown"]["optimizer_states"].get<int64_t>());

  const CliRun search = run_cli(
      "plan" + model +
      " --gpu-memory 1GiB --search-precisions pure_bf16+kahan"
      " --search-optims adamw_torch,adamw_bf16,lion --search-policies none --search-adapters full"
      " --json");
  ASSERT_EQ(search.exit_code, 0) << search.err;
  const nlohmann::json found = nlohmann::json::parse(search.out)["search"];
  ASSERT_EQ(found["configurations"].size(), 1u) << found.dump();
  EXPECT_EQ(found["configurations"][0]["precision"], "pure_bf16+kahan");
  EXPECT_EQ(found["configurations"][0]["optim"], "adamw_torch");
  EXPECT_TRUE(found["unsupported"].empty()) << found["unsupported"].dump();
}

TEST(HeadroomPlanCli, SearchesAGpuAndPlansInference) {
  const CliRun text = run_cli(
      "plan --model gpt2-tiny --max_seq_length 256 --per_device_train_batch_size 8"
      " --gradient_accumulation_steps 2 --gpu RTX4090 --search-optims adamw_torch,lion");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* piece : {"plan: gpt2-tiny", "RTX4090", "formula", "fits in",
                            "CUDA context+workspaces", "configurations fit", "rank"}) {
    EXPECT_NE(text.out.find(piece), std::string::npos) << piece << "\n" << text.out;
  }

  const CliRun json = run_cli(
      "plan --model gpt2-tiny --max_seq_length 256 --per_device_train_batch_size 8"
      " --gpu-memory 1GiB --search-precisions bf16 --search-policies none,full --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json plan = nlohmann::json::parse(json.out);
  EXPECT_EQ(plan["capacity_bytes"], int64_t{1} << 30);
  EXPECT_TRUE(plan["fits"].is_boolean());
  const nlohmann::json& rows = plan["search"]["configurations"];
  ASSERT_FALSE(rows.empty());
  for (const auto& row : rows) {
    EXPECT_EQ(row["precision"], "bf16");
    EXPECT_LE(row["required_bytes"].get<int64_t>(), int64_t{1} << 30);
  }

  const CliRun inference = run_cli(
      "plan --inference --model llama-7b --per_device_eval_batch_size 2 --max_seq_length 4096"
      " --bf16 --gpu H100 --json");
  ASSERT_EQ(inference.exit_code, 0) << inference.err;
  const nlohmann::json serving = nlohmann::json::parse(inference.out);
  // Llama-2-7B: 32 layers x 32 heads x 128 dims, K and V, bf16.
  EXPECT_EQ(serving["kv_cache_bytes"], int64_t{2} * 32 * 32 * 128 * 4096 * 2 * 2);
  EXPECT_EQ(serving["fits"], true);
}

// --max_context: the longest max_seq_length that fits, as given and with the memory savers, and
// a command that re-plans to a fit, where 128 tokens more do not.
TEST(HeadroomPlanCli, FindsTheLongestContextThatFits) {
  const std::string card = " --gpu-memory 700MiB";
  const CliRun search = run_cli("plan --model llama-tiny --per_device_train_batch_size 1" + card +
                                " --max_context --json");
  ASSERT_EQ(search.exit_code, 0) << search.err;
  const nlohmann::json found = nlohmann::json::parse(search.out)["max_context"].at(0);
  const int64_t given = found["as_given"]["max_seq_length"], longest = found["max_seq_length"];
  EXPECT_GT(given, 1024);
  EXPECT_GT(longest, 2 * given);  // checkpointing, tiling and offload make room
  EXPECT_EQ(found["with_memory_savers"]["max_seq_length"], longest);
  EXPECT_GT(found["host_bytes"].get<int64_t>(), 0);  // the offloaded checkpoint inputs
  EXPECT_LE(found["required_bytes"].get<int64_t>(), int64_t{700} << 20);
  std::string command = found["command"];
  ASSERT_EQ(command.rfind("headroom train ", 0), 0u) << command;
  for (const char* option : {"--gradient_checkpointing", "--tiled_mlp", "--offload_activations",
                             "--expandable_segments"}) {
    EXPECT_NE(command.find(option), std::string::npos) << option << ": " << command;
  }
  command = command.substr(std::string("headroom train ").size());
  auto plan_fits = [&](const std::string& options) {
    const CliRun plan = run_cli("plan " + options + card + " --no-search --json");
    EXPECT_EQ(plan.exit_code, 0) << plan.err;
    return plan.exit_code == 0 && nlohmann::json::parse(plan.out)["fits"] == true;
  };
  EXPECT_TRUE(plan_fits(command));
  const std::string length = str_cat("--max_seq_length ", longest);
  ASSERT_NE(command.find(length), std::string::npos) << command;
  EXPECT_FALSE(plan_fits(command.replace(command.find(length), length.size(),
                                         str_cat("--max_seq_length ", longest + 128))));

  const CliRun table = run_cli(
      "plan --model llama-tiny --per_device_train_batch_size 1"
      " --gpu RTX4090,H100-80GB --max_context --no-search --max_steps 1");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* piece : {"RTX4090 (cuda:0)", "H100-80GB (cuda:0)", "headroom train"}) {
    EXPECT_NE(table.out.find(piece), std::string::npos) << piece << "\n" << table.out;
  }
}

// The dry run's history is the predicted timeline: memory_viz opens it as a run's snapshot.
TEST(HeadroomPlanCli, WritesTheDryRunsMemorySnapshot) {
  TempDir dir;
  const std::string snapshot = dir.file("plan.pickle");
  const CliRun plan = run_cli(
      "plan --model gpt2-tiny --max_seq_length 64"
      " --per_device_train_batch_size 2 --memory_snapshot " +
      snapshot);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("snapshot written to " + snapshot), std::string::npos) << plan.out;
  const PickleValue decoded = memory_test::MemoryVizDecoder(read_bytes(snapshot)).decode();
  const auto& devices = decoded.at("devices").as_list();
  size_t meta = devices.size();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].as_string() == "meta") meta = i;
  }
  ASSERT_LT(meta, devices.size());
  size_t allocs = 0;
  for (const PickleValue& entry : decoded.at("device_traces").at(meta).as_list()) {
    allocs += entry.at("action").as_string() == "alloc";
  }
  EXPECT_GT(allocs, 100u);  // two training steps of a 4-layer model
}

TEST(HeadroomPlanCli, UsageErrorsExitTwoOnOneLine) {
  expect_usage_error("plan --gpu GTX480", "GTX480");
  expect_usage_error("plan --gpu-memory lots", "gpu_memory");
  expect_usage_error("plan --device meta", "meta");
  expect_usage_error("plan --device cpu --gpu H100", "device");
  expect_usage_error("plan --optim adamw_16bit", "optim");
  expect_usage_error("plan --model no-such-model", "no-such-model");
  expect_usage_error("plan --gpu H100 --search-optims adamw_16bit", "adamw_16bit");
  const CliRun help = run_cli("plan --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* piece : {"--gpu-memory", "--inference", "--per_device_train_batch_size",
                            "--search-optims", "H100-80GB"}) {
    EXPECT_NE(help.out.find(piece), std::string::npos) << piece;
  }
}

}  // namespace
}  // namespace headroom
