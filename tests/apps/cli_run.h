// Running the `headroom` binary in tests: its exit code and output, and the one-line usage error.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "io/io_test_helpers.h"

namespace headroom {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// Runs `headroom <args>` (args as shell words) and collects its exit code and output;
// `environment` (env(1)'s arguments: NAME=VALUE, -u NAME) changes the environment it runs in.
inline CliRun run_cli(const std::string& args, const std::string& environment = "") {
  io_test::TempDir dir;
  const std::string out = dir.file("out"), err = dir.file("err");
  const std::string command = (environment.empty() ? "" : "env " + environment + " ") +
                              std::string(HEADROOM_CLI_PATH) + " " + args + " >" + out + " 2>" +
                              err;
  const int status = std::system(command.c_str());
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = io_test::read_bytes(out);
  run.err = io_test::read_bytes(err);
  return run;
}

// One line, `headroom: error: ...`, holding `piece`; exit code 2.
inline void expect_usage_error(const std::string& args, const std::string& piece) {
  SCOPED_TRACE(args);
  const CliRun run = run_cli(args);
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.err.rfind("headroom: error: ", 0), 0u) << run.err;
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << "not one line: " << run.err;
  EXPECT_NE(run.err.find(piece), std::string::npos) << run.err;
}

}  // namespace headroom
