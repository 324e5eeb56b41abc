// key_averages() and its table against torch's key_averages().table() for the same scopes and
// allocations (tests/fixtures/profile/key_averages_golden.txt, tools/gen_profiler_golden.py):
// self time and memory, grouping, sorting, row limits and every column's format; with device
// spans too (key_averages_cuda_golden.txt): the Self CUDA / CUDA total columns and kernel rows.
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

KeyAveragesGolden read_golden(const char* fixture = "profile/key_averages_golden.txt") {
  KeyAveragesGolden golden;
  optim_test::for_each_fixture_line(
      fixture, [&](const std::string& keyword, std::istringstream& in) {
        if (keyword == "kernel") {
          DeviceActivity d;
          d.device = Device{DeviceType::cuda, 0};
          in >> d.thread_id >> d.launch_ns >> d.stream >> d.start_ns >> d.end_ns >> d.name;
          d.correlation_id = golden.events.device.size() + 1;
          golden.events.device.push_back(d);
        } else if (keyword == "function") {
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

TEST(KeyAverages, CudaTablesAreTorchsToTheCharacter) {
  KeyAveragesGolden golden = read_golden("profile/key_averages_cuda_golden.txt");
  ASSERT_EQ(golden.tables.size(), 5u);
  ASSERT_EQ(golden.events.device.size(), 15u);
  // Scopes arrive as they end and spans as a source collects them: the order must not matter.
  std::reverse(golden.events.functions.begin(), golden.events.functions.end());
  std::reverse(golden.events.device.begin(), golden.events.device.end());
  const std::vector<KeyAverage> averages = key_averages(golden.events);
  for (const GoldenTable& table : golden.tables) {
    SCOPED_TRACE(
        str_cat("sort_by ", table.options.sort_by, ", row_limit ", table.options.row_limit));
    EXPECT_EQ(key_averages_table(averages, table.options), table.text);
  }
  // torch 2's names of the same keys.
  KeyAveragesTableOptions device_names = golden.tables[0].options;
  device_names.sort_by = "self_device_time_total";
  EXPECT_EQ(key_averages_table(averages, device_names), golden.tables[0].text);
}

TEST(KeyAverages, CudaTimeGoesToTheScopesOpenAtTheLaunch) {
  const KeyAveragesGolden golden = read_golden("profile/key_averages_cuda_golden.txt");
  const std::vector<KeyAverage> averages = key_averages(golden.events);
  auto find = [&](const std::string& key, DeviceType type = DeviceType::cpu) {
    for (const KeyAverage& a : averages) {
      if (a.key == key && a.device_type == type) return a;
    }
    ADD_FAILURE() << key << " missing";
    return KeyAverage{};
  };
  // The first linear launched a bias add after its matmul's GEMM; the second a GEMM and an add.
  const KeyAverage linear = find("linear");
  EXPECT_DOUBLE_EQ(linear.self_cuda_time_total_us, 70.25 + 2000.0 + 70.0);
  EXPECT_DOUBLE_EQ(linear.cuda_time_total_us, 1000.0 + 70.25 + 2000.0 + 70.0);
  EXPECT_DOUBLE_EQ(find("matmul").self_cuda_time_total_us, 1000.0);
  const KeyAverage gemm = find("gemm.gemm", DeviceType::cuda);
  EXPECT_EQ(gemm.count, 3);
  EXPECT_DOUBLE_EQ(gemm.cuda_time_total_us, 6000.0);
  EXPECT_DOUBLE_EQ(gemm.self_cuda_time_total_us, 6000.0);
  EXPECT_DOUBLE_EQ(gemm.cpu_time_total_us, 0.0);
  EXPECT_DOUBLE_EQ(gemm.cuda_time_us(), 2000.0);
  // The step holds every span launched on its thread; the loader's and the scope-less one's are
  // their own threads'.
  const KeyAverage step = find("ProfilerStep#0");
  EXPECT_DOUBLE_EQ(step.self_cuda_time_total_us, 1.5);
  double thread_1 = 0.0, all = 0.0, self_of_scopes = 0.0;
  for (const DeviceActivity& d : golden.events.device) {
    const double us = static_cast<double>(d.end_ns - d.start_ns) / 1000.0;
    all += us;
    if (d.thread_id == 1) thread_1 += us;
  }
  // Sums of the same span times in another order: equal up to double rounding.
  EXPECT_NEAR(step.cuda_time_total_us, thread_1, 1e-9);
  double self_of_spans = 0.0;
  for (const KeyAverage& a : averages) {
    (a.device_type == DeviceType::cuda ? self_of_spans : self_of_scopes) +=
        a.self_cuda_time_total_us;
    EXPECT_LE(a.self_cuda_time_total_us, a.cuda_time_total_us + 1e-9) << a.key;
  }
  // Each span counts once among the scopes' self times, except the one launched outside them
  // (sums in other orders: equal up to double rounding).
  EXPECT_NEAR(self_of_spans, all, 1e-9);
  EXPECT_NEAR(self_of_scopes, all - 20.0, 1e-9);
}

TEST(KeyAverages, TableOptions) {
  EXPECT_EQ(key_averages_table({}), "");
  const std::vector<KeyAverage> averages = {
      {.key = "op", .count = 2, .cpu_time_total_us = 3.0, .self_cpu_time_total_us = 3.0}};
  try {
    key_averages_table(averages, {.sort_by = "cuda_memory"});
    ADD_FAILURE() << "accepted an unknown sort_by";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("sort_by 'cuda_memory'"), std::string::npos) << e.what();
  }
  // No device time: no CUDA time columns, as on a CPU run.
  const std::string cpu_only = key_averages_table(averages, {.sort_by = "self_cuda_time_total"});
  EXPECT_EQ(cpu_only.find("CUDA"), std::string::npos) << cpu_only;
  const std::string no_memory = key_averages_table(averages, {.profile_memory = false});
  EXPECT_EQ(no_memory.find("CPU Mem"), std::string::npos) << no_memory;
  EXPECT_NE(no_memory.find("    op       100.00%       3.000us"), std::string::npos) << no_memory;
  EXPECT_NE(no_memory.find("Self CPU time total: 3.000us\n"), std::string::npos) << no_memory;
  const std::string no_rows = key_averages_table(averages, {.row_limit = 0});
  EXPECT_EQ(no_rows.find(" op "), std::string::npos) << no_rows;
}

}  // namespace
}  // namespace headroom
