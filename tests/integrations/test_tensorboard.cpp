// TensorBoard logs: transformers' tags, the event file's records read back (and refused when a
// byte changed), the committed golden of tools/gen_tensorboard_golden.py (an event file headroom
// wrote, what TensorBoard's own reader made of it, and that run's metrics.jsonl), and a run of
// `headroom train --report_to tensorboard` whose every metrics.jsonl number is a scalar.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_run.h"
#include "core/error.h"
#include "integrations/event_file.h"
#include "integrations/report_to.h"
#include "integrations/tensorboard_callback.h"
#include "io/io_test_helpers.h"
#include "nn/tiny_text.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using io_test::expect_error;
using io_test::read_bytes;
using io_test::TempDir;
using io_test::write_bytes;

const std::string kGoldenDir = std::string(HEADROOM_FIXTURES_DIR) + "/tensorboard";

// tag -> [(step, value)] of every scalar of `records`, and tag -> [(step, text)] of the texts.
struct Decoded {
  std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> texts;
};

Decoded decode(const std::vector<EventRecord>& records) {
  Decoded out;
  for (const EventRecord& record : records) {
    for (const EventValue& value : record.values) {
      if (value.is_text) {
        out.texts[value.tag].emplace_back(record.step, value.text);
      } else {
        out.scalars[value.tag].emplace_back(record.step, value.simple_value);
      }
    }
  }
  return out;
}

// What HF's TensorBoardCallback logs of metrics.jsonl: each number at its entry's step, float32.
std::map<std::string, std::vector<std::pair<int64_t, float>>> expected_scalars(
    const std::string& metrics_jsonl) {
  std::map<std::string, std::vector<std::pair<int64_t, float>>> expected;
  std::istringstream lines(metrics_jsonl);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::ordered_json entry = nlohmann::ordered_json::parse(line);
    for (auto it = entry.begin(); it != entry.end(); ++it) {
      const std::string tag = tensorboard_tag(it.key());
      if (tag.empty() || !it.value().is_number()) continue;
      expected[tag].emplace_back(entry.at("step").get<int64_t>(),
                                 static_cast<float>(it.value().get<double>()));
    }
  }
  return expected;
}

TEST(TensorBoard, TagsAreTransformers) {
  EXPECT_EQ(tensorboard_tag("loss"), "train/loss");
  EXPECT_EQ(tensorboard_tag("grad_norm"), "train/grad_norm");
  EXPECT_EQ(tensorboard_tag("lr"), "train/learning_rate");
  EXPECT_EQ(tensorboard_tag("epoch"), "train/epoch");
  EXPECT_EQ(tensorboard_tag("tokens_per_s"), "train/tokens_per_s");
  EXPECT_EQ(tensorboard_tag("eval_loss"), "eval/loss");
  EXPECT_EQ(tensorboard_tag("eval_perplexity"), "eval/perplexity");
  EXPECT_EQ(tensorboard_tag("eval_runtime"), "eval/runtime");
  EXPECT_EQ(tensorboard_tag("peak_allocated_bytes"), "memory/peak_allocated_bytes");
  EXPECT_EQ(tensorboard_tag("peak_reserved_bytes"), "memory/peak_reserved_bytes");
  EXPECT_EQ(tensorboard_tag("host_peak_reserved_bytes"), "memory/host_peak_reserved_bytes");
  EXPECT_EQ(tensorboard_tag("step"), "");
}

TEST(TensorBoard, MaskedCrcIsTfRecords) {
  // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c's values.
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xc78ab0e5u);
  EXPECT_EQ(masked_crc32c("", 0), 0xa282ead8u);
}

TEST(TensorBoard, ReportToValues) {
  EXPECT_FALSE(parse_report_to("none").tensorboard);
  EXPECT_TRUE(parse_report_to("all").tensorboard);
  EXPECT_TRUE(parse_report_to("tensorboard").tensorboard);
  expect_error<ValueError>([] { parse_report_to("tensorboard,wandb"); },
                           {"unknown integration 'wandb'", "tensorboard, or all, or none"});
  const std::string dir = default_logging_dir("out");
  EXPECT_TRUE(std::regex_match(dir, std::regex(R"(out/runs/[A-Z][a-z]{2}\d\d_\d\d-\d\d-\d\d_.*)")))
      << dir;
}

TEST(TensorBoard, EventFileRoundTripsAndAChangedByteIsRefused) {
  TempDir dir;
  std::string path;
  {
    EventFileWriter writer(dir.file("logs"));
    path = writer.path();
    writer.add_text("args", "{\"a\": 1}", 0);
    writer.add_scalar("train/loss", 2.5, 10);
    writer.add_scalar("train/loss", 1.0 / 3.0, 20);
    writer.flush();
  }
  EXPECT_TRUE(std::regex_match(fs::path(path).filename().string(),
                               std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.\d+\.\d+)")))
      << path;
  const std::vector<EventRecord> records = read_event_file(path);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].file_version, "brain.Event:2");
  EXPECT_GT(records[0].wall_time, 1.7e9);
  const Decoded decoded = decode(records);
  ASSERT_EQ(decoded.texts.at("args/text_summary").size(), 1u);
  EXPECT_EQ(decoded.texts.at("args/text_summary")[0].second, "{\"a\": 1}");
  const auto& loss = decoded.scalars.at("train/loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_EQ(loss[0], std::make_pair(int64_t{10}, 2.5f));
  EXPECT_EQ(loss[1], std::make_pair(int64_t{20}, static_cast<float>(1.0 / 3.0)));

  std::string bytes = read_bytes(path);
  bytes[bytes.size() - 6] ^= 0x01;  // inside the last record's data
  write_bytes(path, bytes);
  expect_error<Error>([&] { read_event_file(path); }, {path, "the data's CRC does not match"});
  write_bytes(path, bytes.substr(0, bytes.size() - 2));
  expect_error<Error>([&] { read_event_file(path); }, {path, "truncated"});
}

// The committed event file decodes to what TensorBoard's EventAccumulator read of it (wall
// times, steps, values, the args text), and those scalars are metrics.jsonl's numbers.
TEST(TensorBoard, GoldenEventFileReadsAsTensorBoardReadIt) {
  const std::vector<EventRecord> records =
      read_event_file(kGoldenDir + "/events.out.tfevents.golden");
  const nlohmann::json read =
      nlohmann::json::parse(read_bytes(kGoldenDir + "/tensorboard_read.json"));
  std::map<std::string, std::vector<std::tuple<double, int64_t, float>>> ours;
  std::map<std::string, std::vector<std::tuple<double, int64_t, std::string>>> our_texts;
  for (const EventRecord& record : records) {
    for (const EventValue& value : record.values) {
      if (value.is_text) {
        our_texts[value.tag].emplace_back(record.wall_time, record.step, value.text);
      } else {
        ours[value.tag].emplace_back(record.wall_time, record.step, value.simple_value);
      }
    }
  }
  std::map<std::string, std::vector<std::tuple<double, int64_t, float>>> theirs;
  for (const auto& [tag, events] : read.at("scalars").items()) {
    for (const nlohmann::json& e : events) {
      theirs[tag].emplace_back(e[0].get<double>(), e[1].get<int64_t>(),
                               static_cast<float>(e[2].get<double>()));
    }
  }
  std::map<std::string, std::vector<std::tuple<double, int64_t, std::string>>> their_texts;
  for (const auto& [tag, events] : read.at("texts").items()) {
    for (const nlohmann::json& e : events) {
      their_texts[tag].emplace_back(e[0].get<double>(), e[1].get<int64_t>(),
                                    e[2].get<std::string>());
    }
  }
  EXPECT_EQ(ours, theirs);
  EXPECT_EQ(our_texts, their_texts);
  for (const char* tag :
       {"train/loss", "train/grad_norm", "train/learning_rate", "train/epoch", "eval/loss",
        "eval/perplexity", "memory/peak_allocated_bytes", "memory/peak_reserved_bytes"}) {
    EXPECT_TRUE(theirs.contains(tag)) << tag;
  }
  EXPECT_EQ(decode(records).scalars, expected_scalars(read_bytes(kGoldenDir + "/metrics.jsonl")));
}

// `headroom train --report_to tensorboard`: one event file in --logging_dir, the arguments as text
// first, then every number of every metrics.jsonl entry at its step; with --report_to all and no
// --logging_dir the file goes to output_dir/runs/<date>_<host>; none writes no runs/.
TEST(TensorBoard, TrainWritesEveryMetricAsAScalar) {
  TempDir dir;
  const std::string data = dir.file("data.txt"), out = dir.file("run"), logs = dir.file("tb");
  std::string text;
  for (int copy = 0; copy < 6; ++copy) text += std::string(test_data::kTinyText) + "\n";
  write_bytes(data, text);
  const std::string common = "train --model gpt2-tiny --data " + data +
                             " --max_steps 4 --logging_steps 2 --eval_strategy steps"
                             " --eval_steps 2 --max_eval_samples 2 --max_seq_length 32"
                             " --per_device_train_batch_size 2 --save_strategy no"
                             " --sample_max_new_tokens 0 --disable_tqdm";
  const CliRun run =
      run_cli(common + " --output_dir " + out + " --report_to tensorboard --logging_dir " + logs);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  std::vector<fs::path> files(fs::directory_iterator(logs), fs::directory_iterator{});
  ASSERT_EQ(files.size(), 1u);
  const std::vector<EventRecord> records = read_event_file(files[0].string());
  ASSERT_GE(records.size(), 2u);
  EXPECT_EQ(records[0].file_version, "brain.Event:2");
  ASSERT_EQ(records[1].values.size(), 1u);
  EXPECT_EQ(records[1].values[0].tag, "args/text_summary");
  const nlohmann::json arguments = nlohmann::json::parse(records[1].values[0].text);
  EXPECT_EQ(arguments.at("report_to"), "tensorboard");
  EXPECT_EQ(arguments.at("max_steps"), 4);
  EXPECT_EQ(arguments.at("learning_rate"), 5e-5);
  EXPECT_TRUE(arguments.at("eval_steps") == 2);
  const Decoded decoded = decode(records);
  EXPECT_EQ(decoded.scalars, expected_scalars(read_bytes(out + "/metrics.jsonl")));
  EXPECT_EQ(decoded.scalars.at("eval/loss").size(), 2u);

  const std::string out_all = dir.file("run_all");
  const CliRun all =
      run_cli(common + " --max_steps 2 --output_dir " + out_all + " --report_to all");
  ASSERT_EQ(all.exit_code, 0) << all.out << all.err;
  std::vector<fs::path> runs(fs::directory_iterator(out_all + "/runs"), fs::directory_iterator{});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(std::distance(fs::directory_iterator(runs[0]), fs::directory_iterator{}), 1);

  const std::string out_none = dir.file("run_none");
  const CliRun none = run_cli(common + " --max_steps 2 --output_dir " + out_none);
  ASSERT_EQ(none.exit_code, 0) << none.out << none.err;
  EXPECT_FALSE(fs::exists(out_none + "/runs"));
  expect_usage_error(common + " --output_dir " + dir.file("bad") + " --report_to wandb",
                     "--report_to: unknown integration 'wandb'");
}

}  // namespace
}  // namespace headroom
