// What a crash sweep found about the state a run leaves and reads back (issue 19, defects 1-8):
// eval refuses a model directory without weights, rotation never shows a half-deleted checkpoint,
// leftovers of killed saves are removed, metrics.jsonl write errors stop the run, a fresh run
// refuses another run's checkpoints, every field of a checkpoint's state is checked on load (and
// each file against its checksum), log_history is checked, and the end-of-run sample and plot
// never change the exit status.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "io/hf_config.h"
#include "core/json_file.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/checksums.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;
using test_data::tiny_training_args;

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A process id that is not running: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// The message of `fn`'s exception of type E; a test failure when it throws none.
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return {};
}

// Defect 1: a model directory with config.json alone would be scored with random weights.
TEST(EvalSafety, ModelDirectoryWithoutWeightsIsRefusedNamingTheFile) {
  TempDir tmp("eval_no_weights");
  const TrainingArguments args = tiny_training_args(tmp.path());
  const std::string message = error_of<ValueError>(
      [&] { evaluate_file(base_request(args.model), args.data, 16, 4, "cpu"); });
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find(args.model), std::string::npos) << message;
}

// Defect 2: a checkpoint being deleted by rotation is renamed out of the way first, so that no
// one listing the checkpoints (a resume with "last", a kill in the middle) sees it half-deleted.
TEST(RotationSafety, ACheckpointIsNeverListedHalfDeleted) {
  TempDir tmp("rotation_half_deleted");
  const fs::path out = tmp.path() / "out";
  constexpr int kFiles = 4000;
  for (int step : {1, 2}) {
    const fs::path dir = out / str_cat("checkpoint-", step);
    fs::create_directories(dir);
    for (int i = 0; i < kFiles; ++i) std::ofstream(dir / str_cat("f", i)) << i;
  }
  std::atomic<bool> done{false};
  std::atomic<int> half_deleted{0};
  std::thread observer([&] {
    while (!done.load()) {
      for (const auto& [step, path] : list_checkpoints(out.string())) {
        std::error_code ec;
        int count = 0;
        for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) ++count;
        // A partial count of a directory that still has its checkpoint name.
        if (count < kFiles && fs::is_directory(path)) half_deleted.fetch_add(1);
      }
    }
  });
  const std::vector<std::string> deleted = rotate_checkpoints(out.string(), 1);
  done.store(true);
  observer.join();
  EXPECT_EQ(half_deleted.load(), 0);
  ASSERT_EQ(deleted.size(), 1u);
  EXPECT_EQ(names_in(out), std::vector<std::string>{"checkpoint-2"});
}

// Defects 2 and 3: leftovers of killed saves, rotations and whole-file writes (whose process is
// gone) are removed by the next run; one of a live process (pid 1) is another run's save in
// progress and stays.
TEST(RotationSafety, LeftoversOfKilledSavesAreRemovedByTheNextRun) {
  TempDir tmp("leftovers");
  TrainingArguments args = tiny_training_args(tmp.path());
  const fs::path out(args.output_dir);
  const pid_t gone = dead_pid();
  for (const std::string& name :
       {str_cat("tmp-checkpoint-2-", gone), str_cat("deleting-checkpoint-1-", gone),
        std::string("tmp-checkpoint-6-1")}) {
    fs::create_directories(out / name);
    std::ofstream(out / name / "config.json") << "{}";
  }
  // A killed write of the final model's weights (core/atomic_file.h's temporary name).
  std::ofstream(out / str_cat(".model.safetensors.tmp-", gone, "-0-320790")) << "half";
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  const std::vector<std::string> names = names_in(out);
  for (const std::string& name : names) {
    EXPECT_TRUE(name.rfind("deleting-", 0) != 0 && name.find(".tmp-") == std::string::npos &&
                (name.rfind("tmp-", 0) != 0 || name == "tmp-checkpoint-6-1"))
        << name << " was left behind";
  }
  EXPECT_TRUE(fs::exists(out / "tmp-checkpoint-6-1"));
}

// Defect 4: a full disk (/dev/full) under metrics.jsonl stops the run at the first failed write.
class FullDiskUnderMetrics : public TrainerCallback {
 public:
  explicit FullDiskUnderMetrics(fs::path metrics) : metrics_(std::move(metrics)) {}
  void on_step_end(Trainer& trainer) override {
    if (trainer.global_step() != 2) return;
    fs::remove(metrics_);
    fs::create_symlink("/dev/full", metrics_);
  }

 private:
  fs::path metrics_;
};

TEST(MetricsSafety, AFailedMetricsWriteFailsTheRunNamingThePath) {
  TempDir tmp("metrics_full_disk");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.save_strategy = "no";
  const fs::path metrics = fs::path(args.output_dir) / "metrics.jsonl";
  Trainer trainer(args);
  trainer.add_callback(std::make_shared<FullDiskUnderMetrics>(metrics));
  const std::string message = error_of<Error>([&] { trainer.train(); });
  EXPECT_NE(message.find(metrics.string()), std::string::npos) << message;
  EXPECT_EQ(trainer.global_step(), 2) << "the run went on after the failed write";
}

// Defect 5: a fresh run into another run's output_dir.
TEST(OutputDirSafety, AFreshRunRefusesAnOutputDirWithCheckpoints) {
  TempDir tmp("output_dir_refused");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.max_steps = 6;
  {
    Trainer first(args);
    ASSERT_EQ(first.train(), 0);
  }
  TrainingArguments again = args;
  again.max_steps = 4;
  again.save_total_limit = 1;
  Trainer second(again);
  const std::string message = error_of<ValueError>([&] { second.train(); });
  EXPECT_NE(message.find("overwrite_output_dir"), std::string::npos) << message;
  EXPECT_NE(message.find("checkpoint-6"), std::string::npos) << message;
  EXPECT_TRUE(fs::exists(fs::path(args.output_dir) / "checkpoint-6"));

  // --overwrite_output_dir: the old checkpoints go, the new ones are kept by rotation.
  again.overwrite_output_dir = true;
  Trainer third(again);
  ASSERT_EQ(third.train(), 0);
  EXPECT_EQ(list_checkpoints(args.output_dir).size(), 1u);
  EXPECT_EQ(list_checkpoints(args.output_dir).at(0).first, 4);
}

TEST(OutputDirSafety, ResumingACheckpointPastMaxStepsIsRefused) {
  TempDir tmp("resume_past_max_steps");
  TrainingArguments args = tiny_training_args(tmp.path());
  {
    Trainer first(args);
    ASSERT_EQ(first.train(), 0);
  }
  const std::string model = (fs::path(args.output_dir) / "model.safetensors").string();
  const std::string weights = read_text_file(model);
  args.max_steps = 3;
  args.resume_from_checkpoint = "last";
  Trainer resumed(args);
  const std::string message = error_of<ValueError>([&] { resumed.train(); });
  EXPECT_NE(message.find("checkpoint-4"), std::string::npos) << message;
  EXPECT_NE(message.find("max_steps"), std::string::npos) << message;
  EXPECT_EQ(read_text_file(model), weights) << "the model in output_dir was overwritten";
}

// Defects 6 and 7: every field of the checkpoint's state is checked as construction checks it.
class CheckedState : public ::testing::Test {
 protected:
  void SetUp() override {
    args_ = tiny_training_args(tmp_.path());
    args_.precision = "fp16";
    Trainer trainer(args_);
    ASSERT_EQ(trainer.train(), 0);
    newest_ = fs::path(args_.output_dir) / "checkpoint-4";
  }

  // Resuming from the newest checkpoint must fail with a ValueError naming `file`.
  void expect_refused(const std::string& file) {
    TrainingArguments args = args_;
    args.resume_from_checkpoint = newest_.string();
    args.max_steps = 6;
    Trainer trainer(args);
    const std::string message = error_of<ValueError>([&] { trainer.train(); });
    EXPECT_NE(message.find(file), std::string::npos) << message;
  }

  nlohmann::ordered_json read_json(const std::string& file) {
    return nlohmann::ordered_json::parse(read_text_file((newest_ / file).string()));
  }
  // Rewrites a file of the checkpoint and, so that the field checks are what is tested, its
  // checksum.
  void write_json(const std::string& file, const nlohmann::ordered_json& value) {
    std::ofstream(newest_ / file, std::ios::trunc) << value.dump(2);
    resign();
  }
  void resign() { write_checkpoint_checksums(newest_.string()); }

  // Rewrites optimizer.safetensors with its metadata changed by `edit`.
  void edit_optimizer_meta(const std::function<void(nlohmann::json&)>& edit) {
    SafetensorsFile optimizer((newest_ / kOptimizerFile).string());
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : optimizer.names()) {
      tensors.emplace_back(name, optimizer.load(name));
    }
    auto metadata = optimizer.metadata();
    nlohmann::json meta = nlohmann::json::parse(metadata.at(kOptimizerMetaKey));
    edit(meta);
    metadata[kOptimizerMetaKey] = meta.dump();
    const fs::path rewritten = newest_ / "optimizer.safetensors.new";
    save_safetensors(rewritten.string(), tensors, metadata);
    fs::rename(rewritten, newest_ / kOptimizerFile);
    resign();
  }

  TempDir tmp_{"checked_state"};
  TrainingArguments args_;
  fs::path newest_;
};

TEST_F(CheckedState, OptimizerStepThatIsNotAnIntegerIsRefused) {
  edit_optimizer_meta([](nlohmann::json& meta) { meta["state"]["0.0"]["step"] = 1e300; });
  expect_refused(kOptimizerFile);
}

TEST_F(CheckedState, NegativeWeightDecayIsRefused) {
  edit_optimizer_meta([](nlohmann::json& meta) { meta["param_groups"][0]["weight_decay"] = -0.5; });
  expect_refused(kOptimizerFile);
}

TEST_F(CheckedState, RoundingGeneratorOffsetThatIsNotAnIntegerIsRefused) {
  edit_optimizer_meta([](nlohmann::json& meta) { meta["rounding_generator"]["offset"] = -1.5; });
  expect_refused(kOptimizerFile);
}

TEST_F(CheckedState, ScalerScaleOutOfRangeIsRefused) {
  for (double scale : {0.0, -65536.0, 1e300}) {
    nlohmann::ordered_json scaler = read_json(kScalerFile);
    scaler["scale"] = scale;
    write_json(kScalerFile, scaler);
    SCOPED_TRACE(scale);
    expect_refused(kScalerFile);
  }
}

TEST_F(CheckedState, HugeDataEpochIsRefused) {
  nlohmann::ordered_json rng = read_json(kRngStateFile);
  rng["data"]["epoch"] = int64_t{4611686018427387904};
  write_json(kRngStateFile, rng);
  expect_refused(kRngStateFile);
}

TEST_F(CheckedState, GeneratorOffsetThatIsNotAnIntegerIsRefused) {
  nlohmann::ordered_json rng = read_json(kRngStateFile);
  rng["generator"]["offset"] = 1e300;
  write_json(kRngStateFile, rng);
  expect_refused(kRngStateFile);
}

TEST_F(CheckedState, TotalTokensOutOfRangeIsRefused) {
  for (const nlohmann::ordered_json& value :
       {nlohmann::ordered_json(1e300), nlohmann::ordered_json(-5)}) {
    nlohmann::ordered_json state = read_json(kTrainerStateFile);
    state["headroom"]["total_tokens"] = value;
    write_json(kTrainerStateFile, state);
    SCOPED_TRACE(value.dump());
    expect_refused(kTrainerStateFile);
  }
}

// Defect 7: an entry with a loss but no step, or a loss that is not a number (null is what JSON
// makes of a NaN loss: accepted, and left out of the plot).
TEST_F(CheckedState, LogHistoryEntriesAreChecked) {
  const nlohmann::ordered_json original = read_json(kTrainerStateFile);
  for (const nlohmann::ordered_json& entry :
       {nlohmann::ordered_json{{"loss", 1.5}}, nlohmann::ordered_json{{"loss", "x"}, {"step", 1}},
        nlohmann::ordered_json{{"loss", true}, {"step", 1}},
        nlohmann::ordered_json{{"eval_loss", 2.0}, {"step", 2.5}}}) {
    nlohmann::ordered_json state = original;
    state["log_history"].push_back(entry);
    write_json(kTrainerStateFile, state);
    SCOPED_TRACE(entry.dump());
    expect_refused(kTrainerStateFile);
  }
}

// Defect 6: a checksum of each file, verified on resume and by eval.
TEST_F(CheckedState, AChangedByteInTheWeightsIsRefusedOnResumeAndEval) {
  const fs::path weights = newest_ / "model.safetensors";
  {
    std::fstream file(weights, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(fs::file_size(weights) - 3));
    file.put('\x7f');
  }
  expect_refused("model.safetensors");
  const std::string message = error_of<ValueError>(
      [&] { evaluate_file(base_request(newest_.string()), args_.data, 16, 4, "cpu"); });
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
}

// Defect 8: the sample's tokenizer cannot decode the ids of a model with a larger vocabulary; the
// run has saved everything and still succeeds, with a warning.
TEST(EndOfRunSafety, AnUndecodableSampleDoesNotFailTheRun) {
  TempDir tmp("sample_decode");
  TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
  GPT2Config config = std::get<GPT2Config>(read_hf_config(args.model));
  config.vocab_size = 4096;  // the byte tokenizer has 256 tokens
  write_hf_config(args.model, config);
  args.save_strategy = "no";
  args.max_steps = 1;
  args.sample_max_new_tokens = 32;
  Trainer trainer(args);
  EXPECT_EQ(trainer.train(), 0);
  EXPECT_TRUE(fs::exists(fs::path(args.output_dir) / "model.safetensors"));
}

// Defect 8: a stop request during the end-of-run steps ends the sample; the exit status stays.
class StopAtTheEnd : public TrainerCallback {
 public:
  void on_train_end(Trainer&) override { request_training_stop(SIGINT); }
};

TEST(EndOfRunSafety, AStopRequestSkipsTheSample) {
  TempDir tmp("sample_stop");
  TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
  args.save_strategy = "no";
  args.max_steps = 1;
  args.sample_max_new_tokens = 64;
  Trainer trainer(args);
  trainer.add_callback(std::make_shared<StopAtTheEnd>());
  EXPECT_EQ(trainer.train(), 0);
  EXPECT_EQ(trainer.sample(), "");
  EXPECT_EQ(training_stop_requested(), 0);
  EXPECT_TRUE(fs::exists(fs::path(args.output_dir) / "model.safetensors"));
}

}  // namespace
}  // namespace headroom
