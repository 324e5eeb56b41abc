// rank_options_difference on 2 ranks (Note [Every rank runs rank 0's options]): the same options
// agree; another value on rank 1, or an option rank 0 lacks, gives every rank the same line
// naming it, both values and the rank.
#include <gtest/gtest.h>

#include "dist/rank_options.h"
#include "mpi/mpi_world.h"

namespace headroom {
namespace {

using test_mpi::kNeedsTwoRanks;
using test_mpi::world;

nlohmann::ordered_json options(int64_t max_steps, const std::string& model) {
  nlohmann::ordered_json o;
  o["model"] = model;
  o["max_steps"] = max_steps;
  o["learning_rate"] = 5e-5;
  o["resume_from_checkpoint"] = nullptr;
  return o;
}

TEST(RankOptions, TheSameOptionsAgree) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  EXPECT_EQ(rank_options_difference(*world(), options(10, "gpt2")), "");
}

TEST(RankOptions, AnotherValueOnRankOneIsNamedOnEveryRank) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  const int rank = world()->rank();
  const std::string line = rank_options_difference(*world(), options(rank == 1 ? 20 : 10, "gpt2"));
  EXPECT_NE(line.find("max_steps is 20 on rank 1 and 10 on rank 0 (rank 1 differs from rank 0)"),
            std::string::npos)
      << "rank " << rank << ": " << line;
  // Strings compare as JSON values: another model directory.
  const std::string model =
      rank_options_difference(*world(), options(10, rank == 1 ? "b/llama" : "a/llama"));
  EXPECT_NE(model.find("model is \"b/llama\" on rank 1 and \"a/llama\" on rank 0"),
            std::string::npos)
      << "rank " << rank << ": " << model;
}

TEST(RankOptions, AnOptionRankZeroLacksIsNamed) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  nlohmann::ordered_json o = options(10, "gpt2");
  if (world()->rank() == 1) o["extra"] = true;
  const std::string line = rank_options_difference(*world(), o);
  EXPECT_NE(line.find("extra is true on rank 1 and absent on rank 0"), std::string::npos) << line;
}

}  // namespace
}  // namespace headroom
