// What the training benchmarks share: the token stream both sides train on, RSS readings, medians,
// and running a Python peer that ends with a "RESULT key=value ..." line.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

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

}  // namespace headroom::bench
