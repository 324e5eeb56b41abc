// The single-process parts of data-parallel training: DDP's bucket assignment (1 MiB first,
// 25 MiB after, reverse order, per dtype), the launcher's variables, and each rank's shard of the
// batches. The collectives themselves run under mpirun (tests/mpi).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/gradient_reducer.h"
#include "dist/launch_environment.h"
#include "train/checkpoint.h"
#include "train/sharded_batch_source.h"
#include "train/trainer_fixture.h"
#include "train/zero_checkpoint.h"

namespace headroom {
namespace {

std::vector<Tensor> meta_params(const std::vector<std::pair<int64_t, DType>>& sizes) {
  std::vector<Tensor> params;
  for (const auto& [numel, dtype] : sizes) params.push_back(Tensor::empty({numel}, dtype, kMeta));
  return params;
}

TEST(GradientBucketAssignment, FirstBucketOneMibThenTwentyFiveInReverseOrder) {
  // 16 f32 parameters of 512 KiB (128 Ki elements): reversed, the first bucket closes at 1 MiB
  // (2 parameters), the next ones at 25 MiB would need 50; so the other 14 share the last bucket.
  const std::vector<Tensor> params =
      meta_params(std::vector<std::pair<int64_t, DType>>(16, {128 << 10, DType::f32}));
  const auto buckets = gradient_bucket_assignment(params, {});
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (std::vector<size_t>{15, 14}));
  ASSERT_EQ(buckets[1].size(), 14u);
  EXPECT_EQ(buckets[1].front(), 13u);
  EXPECT_EQ(buckets[1].back(), 0u);
}

TEST(GradientBucketAssignment, BigParametersGetTheirOwnBucketsAndDtypesSeparate) {
  // 30 MiB f32 (over the cap), then bf16 and f32 small ones.
  const std::vector<Tensor> params = meta_params(
      {{30 << 18, DType::f32}, {1000, DType::bf16}, {1000, DType::f32}, {30 << 18, DType::f32}});
  const auto buckets = gradient_bucket_assignment(params, {});
  // In reverse: 3 fills f32's first bucket alone; 2 and 0 fill its second; bf16's is left open.
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], (std::vector<size_t>{3}));     // 30 MiB >= 1 MiB
  EXPECT_EQ(buckets[1], (std::vector<size_t>{2, 0}));  // 4000 B + 30 MiB >= 25 MiB
  EXPECT_EQ(buckets[2], (std::vector<size_t>{1}));     // bf16's, never full
  EXPECT_THROW(gradient_bucket_assignment(params, {.bucket_cap_bytes = 0}), ValueError);
}

// Sets variables for a scope and restores them.
class ScopedEnv {
 public:
  using Values = std::vector<std::pair<const char*, const char*>>;
  explicit ScopedEnv(Values values) {
    for (const char* name :
         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
          "OMPI_COMM_WORLD_LOCAL_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(name);
    }
    for (const auto& [name, value] : values) ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST(LaunchEnvironment, MpirunThenTorchrunThenOneProcess) {
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"RANK", "3"},
                   {"WORLD_SIZE", "8"}});
    const LaunchEnvironment e = launch_environment();
    EXPECT_EQ(e.launcher, "mpirun");
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.world_size, 4);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.local_world_size, 2);
  }
  {
    ScopedEnv env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}});
    const LaunchEnvironment e = launch_environment();
    EXPECT_EQ(e.launcher, "torchrun");
    EXPECT_EQ(e.rank, 3);
    EXPECT_EQ(e.world_size, 8);
    EXPECT_EQ(e.local_rank, 3);
    EXPECT_TRUE(e.distributed());
  }
  {
    ScopedEnv env(ScopedEnv::Values{});
    EXPECT_FALSE(launch_environment().distributed());
    EXPECT_EQ(make_communicator(launch_environment(), kCPU), nullptr);
  }
  {
    ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    EXPECT_THROW(launch_environment(), ValueError);
  }
  {
    ScopedEnv env(ScopedEnv::Values{{"WORLD_SIZE", "two"}});
    EXPECT_THROW(launch_environment(), ValueError);
  }
}

// Batches numbered by their first input id: batch k holds k.
class CountingSource final : public BatchSource {
 public:
  explicit CountingSource(int64_t per_epoch) : per_epoch_(per_epoch) {}
  TokenBatch next_batch() override {
    const Tensor ids = Tensor::full({1, 1}, static_cast<double>(next_++), DType::i64);
    return {ids, ids};
  }
  void skip_batch() override {
    ++next_;
    ++skipped_;
  }
  int64_t batches_per_epoch() const override { return per_epoch_; }
  int64_t batches_consumed() const override { return next_; }
  int64_t eval_batch_count(int64_t) const override { return 0; }
  TokenBatch eval_batch(int64_t, int64_t) const override { throw IndexError("none"); }
  nlohmann::json state_dict() const override { return {{"next", next_}}; }
  void load_state_dict(const nlohmann::json& state) override { next_ = state.at("next"); }
  int64_t skipped_ = 0;

 private:
  int64_t per_epoch_;
  int64_t next_ = 0;
};

TEST(ShardedBatchSource, RankRTakesEveryWorldSizethBatchFromR) {
  auto inner = std::make_unique<CountingSource>(9);
  CountingSource* counting = inner.get();
  ShardedBatchSource shard(std::move(inner), 1, 3);
  std::vector<int64_t> taken;
  for (int i = 0; i < 3; ++i) taken.push_back(shard.next_batch().input_ids.to_int64_vector()[0]);
  EXPECT_EQ(taken, (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(counting->skipped_, 6);  // the other ranks' batches are skipped, not assembled
  EXPECT_EQ(shard.batches_per_epoch(), 3);
  EXPECT_EQ(shard.batches_consumed(), 3);
  EXPECT_EQ(shard.state_dict(), (nlohmann::json{{"next", 9}}));
  EXPECT_THROW(ShardedBatchSource(std::make_unique<CountingSource>(2), 0, 3), ValueError);
  EXPECT_THROW(ShardedBatchSource(std::make_unique<CountingSource>(9), 3, 3), ValueError);
}

// Note [ZeRO checkpoints]: the manifest decides which file each rank reads, and refuses a world
// size or a sharding other than the run's by name.
TEST(ZeroCheckpoint, TheManifestPicksEachRanksShardAndRefusesAnotherWorldSize) {
  test_data::TempDir dir("zero_manifest");
  const std::string path = dir.path().string();
  EXPECT_EQ(zero_checkpoint_optimizer_file(path, 0, 1, false), kOptimizerFile);
  EXPECT_THROW(zero_checkpoint_optimizer_file(path, 0, 2, true), ValueError);  // unsharded

  write_zero_manifest(path, 2, 2);
  EXPECT_EQ(zero_checkpoint_optimizer_file(path, 1, 2, true), "optimizer-rank-1-of-2.safetensors");
  for (const auto& [world, sharded] : {std::pair{4, true}, std::pair{1, false}}) {
    try {
      zero_checkpoint_optimizer_file(path, 0, world, sharded);
      ADD_FAILURE() << "world_size " << world << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("mpirun -np 2"), std::string::npos) << e.what();
    }
  }
  std::ofstream(dir.path() / kZeroManifestFile) << R"({"world_size": "two"})";
  EXPECT_THROW(zero_checkpoint_optimizer_file(path, 0, 2, true), ValueError);
}

}  // namespace
}  // namespace headroom
