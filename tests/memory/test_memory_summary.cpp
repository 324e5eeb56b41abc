// Golden tests of format_memory_summary against text from PyTorch's own memory_summary()
// (tests/fixtures/memory_summary_*.txt, made by tools/gen_memory_summary_golden.py).
#include "memory/memory_summary.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace headroom {
namespace {

std::string fixture_path(const std::string& name) {
  return std::string(HEADROOM_FIXTURES_DIR) + "/" + name;
}

std::string read_fixture(const std::string& name) {
  std::ifstream in(fixture_path(name), std::ios::binary);
  if (!in) throw Error(str_cat("cannot read fixture ", fixture_path(name)));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct SummaryCase {
  std::map<std::string, int64_t> stats;
  std::string device_name;
  bool abbreviated = false;
};

// The .stats files hold `key=value` lines: device_name, abbreviated, then the stats.
SummaryCase read_case(const std::string& name) {
  SummaryCase c;
  std::istringstream lines(read_fixture(str_cat("memory_summary_", name, ".stats")));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw Error(str_cat("bad fixture line: ", line));
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "device_name") {
      c.device_name = value;
    } else if (key == "abbreviated") {
      c.abbreviated = value == "1";
    } else {
      c.stats[key] = std::stoll(value);
    }
  }
  return c;
}

class MemorySummaryGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(MemorySummaryGolden, MatchesPyTorchText) {
  const SummaryCase c = read_case(GetParam());
  const std::string expected = read_fixture(str_cat("memory_summary_", GetParam(), ".txt"));
  EXPECT_EQ(format_memory_summary(c.stats, c.device_name, c.abbreviated), expected);
}

// zero: all counters 0. units: every size unit B..TiB and count unit, pool rows in the all row's
// unit. abbreviated: the same without pool rows. edges: both sides of each switch point,
// negative values (floored like Python's //), PiB, and values wider than their column.
INSTANTIATE_TEST_SUITE_P(Fixtures, MemorySummaryGolden,
                         ::testing::Values("zero", "units", "abbreviated", "edges"));

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(MemorySummary, AbbreviatedLeavesOutPoolRows) {
  const SummaryCase c = read_case("units");
  const std::string full = format_memory_summary(c.stats, "d", false);
  const std::string brief = format_memory_summary(c.stats, "d", true);
  EXPECT_EQ(split_lines(full).size(), 47u);
  EXPECT_EQ(split_lines(brief).size(), 29u);
  EXPECT_NE(full.find("from large pool"), std::string::npos);
  EXPECT_EQ(brief.find("from large pool"), std::string::npos);
}

TEST(MemorySummary, LongDeviceNamesKeepTheTitleWidth) {
  const SummaryCase c = read_case("zero");
  const std::string name30 = "cuda:0 (NVIDIA H100 80GB HBM3)";
  const std::string name41(41, 'n');
  const std::string name60 = "NVIDIA GH200 480GB with a name far longer than any real device";
  for (const std::string& name : {name30, name41, name60}) {
    const std::vector<std::string> lines = split_lines(format_memory_summary(c.stats, name));
    for (const std::string& line : lines) EXPECT_EQ(line.size(), 77u) << line;
    EXPECT_EQ(lines[1].substr(0, 2), "| ") << lines[1];
    EXPECT_EQ(lines[1].substr(lines[1].size() - 2), " |") << lines[1];
  }
  EXPECT_NE(format_memory_summary(c.stats, name30).find("device " + name30 + " |"),
            std::string::npos);
  EXPECT_NE(format_memory_summary(c.stats, name41)
                .find("| headroom memory summary, device " + name41 + " |"),
            std::string::npos);
  EXPECT_NE(format_memory_summary(c.stats, name60).find(name60.substr(0, 38) + "... |"),
            std::string::npos);
}

TEST(MemorySummary, MissingKeyIsNamed) {
  SummaryCase c = read_case("zero");
  c.stats.erase("requested_bytes.small_pool.freed");
  try {
    format_memory_summary(c.stats, "d");
    ADD_FAILURE() << "no error for a missing key";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'requested_bytes.small_pool.freed'"), std::string::npos)
        << e.what();
  }
  // The abbreviated table does not read pool rows.
  EXPECT_NO_THROW(format_memory_summary(c.stats, "d", true));
}

}  // namespace
}  // namespace headroom
