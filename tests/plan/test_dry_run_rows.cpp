// Note [Planning rows]: the dry run of SFT rows plans the largest batch the file makes, padded,
// padding-free or packed; on rows of one length every batch is that batch, and the plan equals
// the real run's peaks to the byte.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "memory/device_memory.h"
#include "plan/dry_run.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

using test_data::TempDir;

// 24 prompt / completion rows of 13 bytes each ("Q10? " + "It is 7.").
std::string write_equal_rows(const std::filesystem::path& root) {
  const std::string path = (root / "rows.jsonl").string();
  std::ofstream out(path);
  for (int i = 10; i < 34; ++i) {
    out << nlohmann::json{{"prompt", str_cat("Q", i, "? ")},
                          {"completion", str_cat("It is ", i % 10, ".")}}
               .dump()
        << "\n";
  }
  return path;
}

struct RowsCase {
  const char* name;
  bool packing;
  const char* packing_strategy;
  bool padding_free;
  const char* batch;  // what the plan says it planned
};

class DryRunRows : public testing::TestWithParam<RowsCase> {};

TEST_P(DryRunRows, PlanEqualsTheRealRunsPeaks) {
  const RowsCase& c = GetParam();
  TempDir tmp(str_cat("dry_run_rows_", c.name));
  TrainingArguments args = test_data::tiny_training_args(tmp.path(), 0.0);
  args.data = write_equal_rows(tmp.path());
  args.packing = c.packing;
  args.packing_strategy = c.packing_strategy;
  args.padding_free = c.padding_free;
  args.validation_split_percentage = 0.0;
  args.gradient_accumulation_steps = 2;  // the micro-batches are fetched together
  const DryRunResult plan = dry_run_training(args, {.max_micro_batches = 0});
  EXPECT_NE(plan.data_batch.find(c.batch), std::string::npos) << plan.data_batch;
  args.max_steps = 3;
  empty_cache(kCPU);  // as a fresh process: nothing cached by earlier tests
  int64_t allocated = 0, reserved = 0;
  {
    Trainer trainer(args);
    EXPECT_EQ(trainer.train(), 0);
    for (const auto& entry : trainer.log_history()) {
      if (entry.contains("peak_allocated_bytes")) {
        allocated = entry["peak_allocated_bytes"].get<int64_t>();
        reserved = entry["peak_reserved_bytes"].get<int64_t>();
      }
    }
  }
  ASSERT_GT(reserved, 0) << "the run logged no peaks";
  EXPECT_EQ(plan.peak_allocated_bytes, allocated);
  EXPECT_EQ(plan.peak_reserved_bytes, reserved);
}

INSTANTIATE_TEST_SUITE_P(
    Batching, DryRunRows,
    testing::Values(
        RowsCase{"padded", false, "bfd", false, "[4, 13]: the 4 longest rows"},
        RowsCase{"padding_free", false, "bfd", true, "[1, 52]: the 4 longest sequences"},
        // 13-token rows in bins of 16: one a bin, four bins a batch, flattened.
        RowsCase{"packed_bfd", true, "bfd", false, "[1, 52]: the 4 longest sequences"},
        // 312 tokens cut every 16: 19 full rows and one of 8, padded to 16 in its batch.
        RowsCase{"packed_wrapped", true, "wrapped", false, "[4, 16]: the 4 longest rows"}),
    [](const testing::TestParamInfo<RowsCase>& info) { return std::string(info.param.name); });

// Rows of different lengths: the plan is the largest batch, above any the run draws.
TEST(DryRunRows, UnequalRowsPlanTheLongestOnes) {
  TempDir tmp("dry_run_rows_unequal");
  TrainingArguments args = test_data::tiny_training_args(tmp.path(), 0.0);
  args.data = (tmp.path() / "rows.jsonl").string();
  {
    std::ofstream out(args.data);
    for (int i = 0; i < 12; ++i) {
      out << nlohmann::json{{"text", std::string(static_cast<size_t>(2 + i % 5), 'a' + i)}}.dump()
          << "\n";
    }
  }
  args.validation_split_percentage = 0.0;
  const DryRunResult plan = dry_run_training(args);
  // Texts of 2..6 bytes: the four longest are 6, 6, 5, 5 bytes; padded to 6.
  EXPECT_NE(plan.data_batch.find("[4, 6]: the 4 longest rows"), std::string::npos)
      << plan.data_batch;
  args.max_steps = 3;
  empty_cache(kCPU);
  Trainer trainer(args);
  reset_peak_memory_stats(kCPU);
  for (int i = 0; i < 3; ++i) trainer.step();
  EXPECT_LE(static_cast<int64_t>(max_memory_allocated(kCPU)), plan.peak_allocated_bytes);
}

}  // namespace
}  // namespace headroom
