// The log lines of `headroom train`: an entry printed as HF prints its logs dict.
#include "train/progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

TEST(FormatLogLine, PrintsAnEntryAsAPythonDictWithoutTheStep) {
  nlohmann::ordered_json entry = {{"loss", 2.31415926}, {"grad_norm", nullptr}};
  entry["lr"] = 0.00029999999999999997;
  entry["epoch"] = 0.125;
  entry["step"] = 10;
  entry["loss_scale"] = 65536.0;
  entry["tokens_per_s"] = 13870.4;
  entry["peak_allocated_bytes"] = 123456;
  EXPECT_EQ(format_log_line(entry),
            "{'loss': 2.314, 'grad_norm': None, 'lr': 0.0003, 'epoch': 0.125, "
            "'loss_scale': 65536, 'tokens_per_s': 13870, 'peak_allocated_bytes': 123456}");
}

TEST(FormatLogLine, SmallAndNonFiniteValues) {
  nlohmann::ordered_json entry;
  entry["eval_loss"] = NAN;
  entry["eval_perplexity"] = INFINITY;
  entry["lr"] = 1.2345678e-05;
  entry["grad_norm"] = 4.25e-07;
  entry["eval_tokens"] = 64;
  EXPECT_EQ(format_log_line(entry),
            "{'eval_loss': nan, 'eval_perplexity': inf, 'lr': 1.23457e-05, 'grad_norm': 4.25e-07, "
            "'eval_tokens': 64}");
  EXPECT_EQ(format_log_line(nlohmann::ordered_json::object()), "{}");
  EXPECT_EQ(format_log_line({{"step", 3}}), "{}");
}

// Runs `body` with stdout and stderr on a pseudo-terminal, line-buffered as on a real one, and
// returns everything written to it.
template <typename F>
std::string on_a_terminal(F&& body) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
    ADD_FAILURE() << "no pseudo-terminal";
    return "";
  }
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  std::string captured;
  std::atomic<bool> done{false};
  std::thread reader([&] {  // drains the terminal so that writes never block
    char buffer[4096];
    for (;;) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) {
        const ssize_t n = ::read(master, buffer, sizeof(buffer));
        if (n <= 0) return;  // EIO once the last slave descriptor is closed: all is read
        captured.append(buffer, static_cast<size_t>(n));
      } else if (done) {
        return;
      }
    }
  });
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved_out = ::dup(1), saved_err = ::dup(2);
  ::dup2(slave, 1);
  ::dup2(slave, 2);
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  body();
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(saved_out, 1);
  ::dup2(saved_err, 2);
  std::setvbuf(stdout, nullptr, _IOFBF, BUFSIZ);
  ::close(saved_out);
  ::close(saved_err);
  ::close(slave);
  done = true;
  reader.join();
  ::close(master);
  return captured;
}

// On a terminal every line the trainer prints, "Deleting older checkpoint" too, first clears the
// progress bar's line instead of continuing it (issue 19, defect 14).
TEST(ProgressBar, TrainerLinesClearTheBarOnATerminal) {
  test_data::TempDir tmp("progress_terminal");
  TrainingArguments args = test_data::tiny_training_args(tmp.path());
  args.disable_tqdm = false;
  args.save_steps = 1;
  args.save_total_limit = 1;
  int code = -1;
  const std::string out = on_a_terminal([&] { code = Trainer(args).train(); });
  ASSERT_EQ(code, 0) << out;
  ASSERT_NE(out.find("\x1b[K"), std::string::npos) << "no bar was drawn: " << out;
  int deletions = 0;
  for (size_t at = out.find("Deleting older checkpoint"); at != std::string::npos;
       at = out.find("Deleting older checkpoint", at + 1)) {
    ++deletions;
    EXPECT_EQ(out.substr(at >= 4 ? at - 4 : 0, 4), "\r\x1b[K")
        << "printed into the bar's line: " << out.substr(at >= 80 ? at - 80 : 0, 120);
  }
  EXPECT_EQ(deletions, 3) << out;
}

}  // namespace
}  // namespace headroom
