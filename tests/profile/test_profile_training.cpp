// The profiler and the memory snapshot on the Trainer: ProfilerCallback records the schedule's
// steps (forward, backward, optimizer.step and their ops) into output_dir/trace.json, also when a
// stop signal ends the run, and prints the table; run_training's memory_snapshot writes a pickle
// that memory_viz's decoder reads, with the step's phases as frames.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "memory/memory_history.h"
#include "memory/memory_viz_decoder.h"
#include "profile/profiler_callback.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;
using test_data::tiny_training_args;

struct TraceScope {
  std::string name, cat;
  double ts = 0.0, end = 0.0;
};

std::vector<TraceScope> trace_scopes(const fs::path& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file) << path;
  const nlohmann::json trace = nlohmann::json::parse(file);
  std::vector<TraceScope> scopes;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const double ts = e.at("ts");
    scopes.push_back({e.at("name").get<std::string>(), e.at("cat").get<std::string>(), ts,
                      ts + e.at("dur").get<double>()});
  }
  return scopes;
}

// Asks for a stop after step `at`, as the signal handler would.
class StopAfter final : public TrainerCallback {
 public:
  explicit StopAfter(int64_t at) : at_(at) {}
  void on_step_end(Trainer& trainer) override {
    if (trainer.global_step() == at_) request_training_stop(SIGTERM);
  }

 private:
  int64_t at_;
};

TEST(ProfileTraining, TraceHoldsTheScheduledStepsWithTheirPhasesAndOps) {
  TempDir tmp("profile_training");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.save_strategy = "no";
  args.profile = true;
  args.profile_wait = 1;
  args.profile_warmup = 0;
  args.profile_active = 2;
  args.profile_repeat = 1;
  Trainer trainer(args);
  trainer.add_callback(std::make_shared<ProfilerCallback>(args));
  testing::internal::CaptureStdout();
  ASSERT_EQ(trainer.train(), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("Self CPU time total: "), std::string::npos) << out;
  EXPECT_NE(out.find("Profiler trace written to"), std::string::npos) << out;

  const std::vector<TraceScope> scopes = trace_scopes(fs::path(args.output_dir) / "trace.json");
  std::map<std::string, int> steps;
  for (const TraceScope& step : scopes) {
    if (!step.name.starts_with("ProfilerStep#")) continue;
    ++steps[step.name];
    EXPECT_EQ(step.cat, "user_annotation");
    std::map<std::string, int> inside;
    for (const TraceScope& s : scopes) {
      if (s.ts >= step.ts && s.end <= step.end) ++inside[s.name];
    }
    EXPECT_EQ(inside["forward"], 1) << step.name;
    EXPECT_EQ(inside["backward"], 1) << step.name;
    EXPECT_EQ(inside["optimizer.step"], 1) << step.name;
    EXPECT_EQ(inside["clip_grad_norm_"], 1) << step.name;
    EXPECT_EQ(inside["optimizer.zero_grad"], 1) << step.name;
    EXPECT_GT(inside["linear"], 0) << step.name;
    EXPECT_GT(inside["layer_norm"], 0) << step.name;
    EXPECT_GT(inside["LinearBackward0"], 0) << step.name;
  }
  EXPECT_EQ(steps, (std::map<std::string, int>{{"ProfilerStep#1", 1}, {"ProfilerStep#2", 1}}));
}

TEST(ProfileTraining, AStoppedRunStillWritesItsTrace) {
  TempDir tmp("profile_stopped");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.profile = true;
  args.profile_wait = args.profile_warmup = 0;
  args.profile_active = 3;
  Trainer trainer(args);
  trainer.add_callback(std::make_shared<ProfilerCallback>(args));
  trainer.add_callback(std::make_shared<StopAfter>(2));
  testing::internal::CaptureStdout();
  EXPECT_EQ(trainer.train(), 128 + SIGTERM);
  testing::internal::GetCapturedStdout();
  std::map<std::string, int> steps;
  for (const TraceScope& s : trace_scopes(fs::path(args.output_dir) / "trace.json")) {
    if (s.name.starts_with("ProfilerStep#")) ++steps[s.name];
  }
  // Steps 0 and 1 ran; step 2 began (with the stop checkpoint in it) and ended the run.
  EXPECT_EQ(steps, (std::map<std::string, int>{
                       {"ProfilerStep#0", 1}, {"ProfilerStep#1", 1}, {"ProfilerStep#2", 1}}));
}

TEST(ProfileTraining, ProfileOptionsAreCheckedByName) {
  TrainingArguments args;
  args.profile_active = 0;
  try {
    ProfilerCallback callback(args);
    ADD_FAILURE() << "accepted profile_active 0";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("active 0 is below 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("profile_"), std::string::npos) << e.what();
  }
}

TEST(ProfileTraining, MemorySnapshotOfTheRunLoadsAsMemoryVizReadsIt) {
  TempDir tmp("profile_snapshot");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.save_strategy = "no";
  args.max_steps = 2;
  args.memory_snapshot = (tmp.path() / "snapshot.pickle").string();
  testing::internal::CaptureStdout();
  ASSERT_EQ(run_training(args), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("Memory snapshot written to " + args.memory_snapshot), std::string::npos);
  EXPECT_EQ(memory_history_max_entries(), 0u) << "recording is switched off again";

  std::ifstream file(args.memory_snapshot, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const PickleValue snapshot = memory_test::MemoryVizDecoder(bytes).decode();
  const PickleValue::List& devices = snapshot.at("devices").as_list();
  size_t cpu = devices.size();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].as_string() == "cpu") cpu = i;
  }
  ASSERT_LT(cpu, devices.size());
  std::map<std::string, int> allocations_by_phase;
  for (const PickleValue& entry : snapshot.at("device_traces").at(cpu).as_list()) {
    if (entry.at("action").as_string() != "alloc") continue;
    const PickleValue::List& frames = entry.at("frames").as_list();
    ++allocations_by_phase[frames.empty() ? "" : frames[0].at("name").as_string()];
  }
  for (const char* phase : {"forward", "backward", "optimizer.step"}) {
    EXPECT_GT(allocations_by_phase[phase], 0) << phase;
  }
  EXPECT_GT(allocations_by_phase[""], 0) << "the model, built before the first step";
  EXPECT_FALSE(snapshot.at("segments").as_list().empty());
}

}  // namespace
}  // namespace headroom
