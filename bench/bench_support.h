// What the training benchmarks share: the token stream both sides train on, RSS readings, medians,
// and running a Python peer that ends with a "RESULT key=value ..." line.
#pragma once

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/model_config.h"

namespace headroom::bench {

// The token ids of one step: splitmix64 of (seed, step, index) modulo the vocabulary, which
// train_step_peer.py computes identically, so both sides train on the same batches.
inline std::vector<int64_t> batch_tokens(uint64_t seed, int64_t batch, int64_t context,
                                         int64_t vocab, int64_t step) {
  std::vector<int64_t> tokens(static_cast<size_t>(batch * (context + 1)));
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint64_t z = seed * 0x100000000ull + static_cast<uint64_t>(step) * 0x1000000ull + i;
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    tokens[i] = static_cast<int64_t>(z % static_cast<uint64_t>(vocab));
  }
  return tokens;
}

// Resident set now (from /proc) and at its peak so far (getrusage), in bytes: what the peer can
// measure of PyTorch, whose CPU allocator keeps no statistics.
inline size_t current_rss() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

inline size_t peak_rss() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Runs `command` (stderr folded in), echoes its lines, and returns the fields of its
// "RESULT key=value ..." lines, one map per line; `status` gets the exit status.
inline std::vector<std::map<std::string, std::string>> run_peer_command(const std::string& command,
                                                                        int& status) {
  std::vector<std::map<std::string, std::string>> results;
  std::fflush(stdout);
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) {
    status = -1;
    return results;
  }
  char line[4096];
  while (std::fgets(line, sizeof line, pipe)) {
    if (std::strncmp(line, "RESULT ", 7) != 0) {
      std::fputs(line, stdout);
      continue;
    }
    std::map<std::string, std::string> fields;
    char* save = nullptr;
    for (char* word = strtok_r(line + 7, " \n", &save); word;
         word = strtok_r(nullptr, " \n", &save)) {
      if (char* eq = std::strchr(word, '=')) fields[std::string(word, eq)] = eq + 1;
    }
    results.push_back(std::move(fields));
  }
  status = pclose(pipe);
  return results;
}

// Parses the command line: `flags` take no value, `strings` one value, `sizes` a positive integer.
// --help prints `usage` and exits 0; anything else prints a one-line error naming the argument
// and `usage`, and exits 2.
inline void parse_command_line(const char* program, const char* usage, int argc, char** argv,
                               const std::map<std::string, bool*>& flags,
                               const std::map<std::string, std::string*>& strings,
                               const std::map<std::string, int64_t*>& sizes) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s %s\n", program, usage);
      std::exit(0);
    }
    if (flags.count(arg)) {
      *flags.at(arg) = true;
    } else if (i + 1 < argc && strings.count(arg)) {
      *strings.at(arg) = argv[++i];
    } else if (i + 1 < argc && sizes.count(arg)) {
      char* end = nullptr;
      const long long value = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || value < 1) {
        std::fprintf(stderr, "%s: %s needs a positive integer, not '%s'\n", program, arg.c_str(),
                     argv[i]);
        std::exit(2);
      }
      *sizes.at(arg) = value;
    } else {
      std::fprintf(stderr, "%s: unknown or incomplete option '%s'\nusage: %s %s\n", program,
                   arg.c_str(), program, usage);
      std::exit(2);
    }
  }
}

// The GPT-2 the training benchmarks build, dropout off as the peer has it.
inline GPT2Config gpt2_config(int64_t layers, int64_t d_model, int64_t heads, int64_t context,
                              int64_t vocab) {
  GPT2Config config;
  config.n_layer = layers;
  config.n_embd = d_model;
  config.n_head = heads;
  config.n_positions = context;
  config.vocab_size = vocab;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  return config;
}

// One run of bench/train_step_peer.py: the model and schedule, plus any further arguments.
struct TrainStepPeerRun {
  int64_t layers = 0, d_model = 0, heads = 0, context = 0, batch = 0, vocab = 0;
  int64_t steps = 0, warmup = 0;
  uint64_t seed = 0;
  double lr = 0.0, weight_decay = 0.0;
  std::string extra_args = "";  // e.g. "--precision bf16"
};

// Runs the PyTorch peer with this process's thread count (OpenBLAS sizes its own pool from the
// environment, not from torch.set_num_threads) and returns the fields of its last RESULT line;
// nullopt, saying why, when Debian's python3 or the script is missing or it gave no result.
inline std::optional<std::map<std::string, std::string>> run_train_step_peer(
    const TrainStepPeerRun& run) {
  const char* python = "/usr/bin/python3";
  const std::filesystem::path script =
      std::filesystem::path(HEADROOM_SOURCE_DIR) / "bench" / "train_step_peer.py";
  if (access(python, X_OK) != 0 || !std::filesystem::exists(script)) {
    std::printf("peer: skipped (%s or %s missing)\n", python, script.c_str());
    return std::nullopt;
  }
  const std::string threads = std::to_string(omp_get_max_threads());
  setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 1);
  setenv("OMP_NUM_THREADS", threads.c_str(), 1);
  const std::string command =
      str_cat(python, " ", script.string(), " --layers ", run.layers, " --d-model ", run.d_model,
              " --heads ", run.heads, " --context ", run.context, " --batch ", run.batch,
              " --vocab ", run.vocab, " --steps ", run.steps, " --warmup ", run.warmup,
              " --threads ", threads, " --seed ", run.seed, " --lr ", run.lr, " --weight-decay ",
              run.weight_decay, " ", run.extra_args);
  int status = 0;
  const auto results = run_peer_command(command, status);
  if (status != 0 || results.empty() || !results.back().count("step_ms")) {
    std::printf("peer: no result (exit status %d)\n", status);
    return std::nullopt;
  }
  return results.back();
}

}  // namespace headroom::bench
