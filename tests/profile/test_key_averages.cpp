// key_averages() and its table against torch's key_averages().table() for the same scopes and
// allocations (tests/fixtures/profile/key_averages_golden.txt, tools/gen_profiler_golden.py):
// self time and memory, grouping, sorting, row limits and every column's format.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "optim/golden_lines.h"
#include "profile/key_averages.h"

namespace headroom {
namespace {

struct GoldenTable {
  KeyAveragesTableOptions options;
  std::string text;
};

struct KeyAveragesGolden {
  ProfilerEvents events;
  std::vector<GoldenTable> tables;
};

KeyAveragesGolden read_golden() {
  KeyAveragesGolden golden;
  optim_test::for_each_fixture_line(
      "profile/key_averages_golden.txt", [&](const std::string& keyword, std::istringstream& in) {
        if (keyword == "function") {
          RecordedFunction f;
          in >> f.thread_id >> f.start_ns >> f.end_ns >> std::ws;
          std::getline(in, f.name);
          golden.events.functions.push_back(f);
        } else if (keyword == "memory") {
          MemoryRecord m;
          std::string device;
          in >> m.thread_id >> m.time_ns >> device >> m.usage.bytes;
          m.usage.device = Device::parse(device);
          golden.events.memory.push_back(m);
        } else if (keyword == "table") {
          GoldenTable table;
          in >> table.options.sort_by >> table.options.row_limit;
          golden.tables.push_back(table);
        } else if (keyword == "row") {
          in.get();  // the one space after the keyword; the rest is the line as torch prints it
          std::string line;
          std::getline(in, line);
          golden.tables.back().text += line + "\n";
        } else {
          ADD_FAILURE() << "unknown keyword " << keyword;
        }
      });
  return golden;
}

TEST(KeyAverages, TablesAreTorchsToTheCharacter) {
  KeyAveragesGolden golden = read_golden();
  ASSERT_EQ(golden.tables.size(), 5u);
  // Scopes arrive as they end, children before their parents: the order must not matter.
  std::reverse(golden.events.functions.begin(), golden.events.functions.end());
  const std::vector<KeyAverage> averages = key_averages(golden.events);
  for (const GoldenTable& table : golden.tables) {
    SCOPED_TRACE(
        str_cat("sort_by ", table.options.sort_by, ", row_limit ", table.options.row_limit));
    EXPECT_EQ(key_averages_table(averages, table.options), table.text);
  }
}

TEST(KeyAverages, SelfTimeAndMemoryOfNestedScopes) {
  const std::vector<KeyAverage> averages = key_averages(read_golden().events);
  auto find = [&](const std::string& key) {
    for (const KeyAverage& a : averages) {
      if (a.key == key) return a;
    }
    ADD_FAILURE() << key << " missing";
    return KeyAverage{};
  };
  const KeyAverage linear = find("linear");  // two calls; the first holds matmul
  EXPECT_EQ(linear.count, 2);
  EXPECT_DOUBLE_EQ(linear.cpu_time_total_us, 1000.5 + 1500.0);
  EXPECT_DOUBLE_EQ(linear.self_cpu_time_total_us, 1000.5 - 799.75 + 1500.0);
  EXPECT_EQ(linear.cpu_memory_usage, 4096 + 512 + (3 << 20));
  EXPECT_EQ(linear.self_cpu_memory_usage, 512 + (3 << 20));
  const KeyAverage step = find("ProfilerStep#0");
  EXPECT_EQ(step.cuda_memory_usage, int64_t{3} << 29);
  EXPECT_EQ(step.self_cuda_memory_usage, 0);
  EXPECT_EQ(step.self_cpu_memory_usage, 100);
  // The loader thread's scopes nest only among themselves.
  EXPECT_DOUBLE_EQ(find("embedding").self_cpu_time_total_us, 312.345 + 100.0);
  for (const KeyAverage& a : averages) {
    EXPECT_GE(a.self_cpu_time_total_us, 0.0) << a.key;
    EXPECT_LE(a.self_cpu_time_total_us, a.cpu_time_total_us) << a.key;
  }
}

TEST(KeyAverages, TableOptions) {
  EXPECT_EQ(key_averages_table({}), "");
  const std::vector<KeyAverage> averages = {
      {.key = "op", .count = 2, .cpu_time_total_us = 3.0, .self_cpu_time_total_us = 3.0}};
  try {
    key_averages_table(averages, {.sort_by = "cuda_time_total"});
    ADD_FAILURE() << "accepted an unknown sort_by";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("sort_by 'cuda_time_total'"), std::string::npos)
        << e.what();
  }
  const std::string no_memory = key_averages_table(averages, {.profile_memory = false});
  EXPECT_EQ(no_memory.find("CPU Mem"), std::string::npos) << no_memory;
  EXPECT_NE(no_memory.find("    op       100.00%       3.000us"), std::string::npos) << no_memory;
  EXPECT_NE(no_memory.find("Self CPU time total: 3.000us\n"), std::string::npos) << no_memory;
  const std::string no_rows = key_averages_table(averages, {.row_limit = 0});
  EXPECT_EQ(no_rows.find(" op "), std::string::npos) << no_rows;
}

}  // namespace
}  // namespace headroom
