// SIGINT / SIGTERM sent to a running `headroom train` process, as Ctrl-C or a job scheduler sends
// them: the run finishes its step, saves a checkpoint that resumes, and exits 130 / 143.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "apps/cli_run.h"
#include "io/io_test_helpers.h"
#include "nn/tiny_text.h"
#include "train/checkpoint.h"

extern char** environ;

namespace headroom {
namespace {

namespace fs = std::filesystem;
using io_test::read_bytes;
using io_test::TempDir;
using io_test::write_bytes;
using Clock = std::chrono::steady_clock;

// `headroom <args>` started in the background, its stdout and stderr going to files; killed
// (SIGKILL) and reaped if the test leaves before it has exited.
class BackgroundCli {
 public:
  BackgroundCli(const std::vector<std::string>& args, const std::string& out,
                const std::string& err) {
    std::vector<std::string> words = {HEADROOM_CLI_PATH};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // The child starts with SIGINT / SIGTERM unblocked and at their defaults, whatever the test
    // runner set for itself (a background shell ignores SIGINT).
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t none, stop_signals;
    sigemptyset(&none);
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &stop_signals);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int rc = posix_spawn(&pid_, argv[0], &files, &attributes, argv.data(), environ);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&files);
    if (rc != 0) pid_ = -1;
  }
  ~BackgroundCli() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  BackgroundCli(const BackgroundCli&) = delete;
  BackgroundCli& operator=(const BackgroundCli&) = delete;

  bool started() const { return pid_ > 0; }
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == 0) return true;
    pid_ = -1;
    exit_status_ = status;
    return false;
  }
  void signal(int signal_number) { ::kill(pid_, signal_number); }
  // The exit code once the process has exited by itself within `timeout`; -1 otherwise (then it
  // is killed by the destructor).
  int wait_for_exit(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (running() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (pid_ > 0) return -1;
    return WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -1;
  }
  // After wait_for_exit: the signal that ended the process, 0 when it exited by itself.
  int terminating_signal() const {
    return pid_ <= 0 && WIFSIGNALED(exit_status_) ? WTERMSIG(exit_status_) : 0;
  }

 private:
  pid_t pid_ = -1;
  int exit_status_ = 0;
};

// Waits until `path` holds a complete line, or `process` has exited, or `timeout` passes.
bool wait_for_line(const std::string& path, BackgroundCli& process, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline && process.running()) {
    if (read_bytes(path).find('\n') != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void expect_signal_stops_with_a_checkpoint(int signal_number) {
  SCOPED_TRACE(strsignal(signal_number));
  TempDir dir;
  const std::string data = dir.file("data.txt"), out = dir.file("run");
  write_bytes(data, std::string(test_data::kTinyText) + "\n" + test_data::kTinyText + "\n");
  // Far more steps than the test waits for: the run is still training when the signal comes.
  BackgroundCli train(
      {"train", "--model", "gpt2-tiny", "--data", data, "--output_dir", out, "--max_steps",
       "1000000", "--max_seq_length", "16", "--per_device_train_batch_size", "2", "--logging_steps",
       "1", "--save_strategy", "no", "--disable_tqdm"},
      dir.file("stdout"), dir.file("stderr"));
  ASSERT_TRUE(train.started());
  ASSERT_TRUE(wait_for_line(out + "/metrics.jsonl", train, std::chrono::seconds(120)))
      << "no step logged\n"
      << read_bytes(dir.file("stdout")) << read_bytes(dir.file("stderr"));
  train.signal(signal_number);
  const int exit_code = train.wait_for_exit(std::chrono::seconds(120));
  const std::string stdout_text = read_bytes(dir.file("stdout"));
  ASSERT_EQ(exit_code, 128 + signal_number) << stdout_text << read_bytes(dir.file("stderr"));
  EXPECT_NE(stdout_text.find("Stopped by signal " + std::to_string(signal_number)),
            std::string::npos)
      << stdout_text;

  // --save_strategy no: the one checkpoint is the stop's, and it resumes.
  const auto checkpoints = list_checkpoints(out);
  ASSERT_EQ(checkpoints.size(), 1u);
  const int64_t step = checkpoints[0].first;
  EXPECT_GE(step, 1);
  const CliRun resumed =
      run_cli("train --model gpt2-tiny --data " + data + " --output_dir " + out + " --max_steps " +
              std::to_string(step + 1) +
              " --max_seq_length 16"
              " --per_device_train_batch_size 2 --logging_steps 1 --save_strategy no"
              " --sample_max_new_tokens 0 --disable_tqdm --resume_from_checkpoint last");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("Resumed from " + checkpoints[0].second + " at step " +
                             std::to_string(step)),
            std::string::npos)
      << resumed.out;
}

TEST(HeadroomCliSignals, SigintSavesACheckpointAndExits130) {
  expect_signal_stops_with_a_checkpoint(SIGINT);
}

TEST(HeadroomCliSignals, SigtermSavesACheckpointAndExits143) {
  expect_signal_stops_with_a_checkpoint(SIGTERM);
}

// A second Ctrl-C does not wait for the step: the signal's default action ends the process.
// Steps of 96 x 256 tokens take long enough (about a second here) that the second signal, sent
// once the first has been taken, comes while the step still runs. (Two signals sent at once may
// merge into one: the kernel keeps one pending SIGINT.)
TEST(HeadroomCliSignals, SecondSigintEndsTheRunAtOnce) {
  TempDir dir;
  const std::string data = dir.file("data.txt"), out = dir.file("run");
  std::string text;
  for (int copy = 0; copy < 120; ++copy) text += std::string(test_data::kTinyText) + "\n";
  write_bytes(data, text);
  BackgroundCli train(
      {"train", "--model", "gpt2-tiny", "--data", data, "--output_dir", out, "--max_steps",
       "1000000", "--max_seq_length", "256", "--per_device_train_batch_size", "96",
       "--logging_steps", "1", "--save_strategy", "no", "--disable_tqdm"},
      dir.file("stdout"), dir.file("stderr"));
  ASSERT_TRUE(train.started());
  ASSERT_TRUE(wait_for_line(out + "/metrics.jsonl", train, std::chrono::seconds(120)));
  train.signal(SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  train.signal(SIGINT);
  EXPECT_EQ(train.wait_for_exit(std::chrono::seconds(120)), -1);
  EXPECT_EQ(train.terminating_signal(), SIGINT) << read_bytes(dir.file("stdout"));
  EXPECT_TRUE(list_checkpoints(out).empty());
}

}  // namespace
}  // namespace headroom
