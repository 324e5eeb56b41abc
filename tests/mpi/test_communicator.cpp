// The MPI communicator's collectives on 2+ ranks (run by mpirun: see tests/CMakeLists.txt), in
// f32, bf16 and f16, and DDP's GradientReducer against the gradients of both ranks' batches.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "core/dtype_convert.h"
#include "dist/communicator.h"
#include "dist/gradient_reducer.h"
#include "dist/launch_environment.h"
#include "mpi/mpi_world.h"
#include "ops/ops.h"

namespace headroom {
namespace {

using test_mpi::kNeedsTwoRanks;
using test_mpi::world;

class Collectives : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  }
};

// Rank r's element i is (r + 1) * (i + 1): small integers, exact in every dtype.
Tensor rank_values(int rank, int64_t n, DType dtype) {
  std::vector<float> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(static_cast<float>((rank + 1) * (i + 1)));
  return Tensor::from_floats(values, {n}).to(dtype);
}

TEST_P(Collectives, AllReduceSumAvgMax) {
  const int world_size = world()->world_size(), rank = world()->rank();
  const float ranks_sum = static_cast<float>(world_size * (world_size + 1) / 2);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    const Tensor t = rank_values(rank, 5, GetParam());
    world()->all_reduce(t, op);
    const std::vector<float> got = t.to_float_vector();
    for (int64_t i = 0; i < 5; ++i) {
      const float base = static_cast<float>(i + 1);
      const float expected = op == ReduceOp::sum   ? base * ranks_sum
                             : op == ReduceOp::avg ? base * ranks_sum / world_size
                                                   : base * world_size;
      EXPECT_EQ(got[static_cast<size_t>(i)], expected) << reduce_op_name(op) << " " << i;
    }
  }
}

TEST_P(Collectives, AsyncAllReduceCompletesOnWait) {
  const Tensor t = rank_values(world()->rank(), 100, GetParam());  // sums exact in bf16
  auto work = world()->all_reduce_async(t, ReduceOp::sum);
  work->wait();
  EXPECT_TRUE(work->test());
  const int w = world()->world_size();
  EXPECT_EQ(t.to_float_vector()[99], 100.0f * static_cast<float>(w * (w + 1) / 2));
}

TEST_P(Collectives, ReduceScatterGivesEachRankItsChunkReduced) {
  const int w = world()->world_size(), rank = world()->rank();
  const Tensor input = rank_values(rank, 3 * w, GetParam());
  const Tensor output = Tensor::empty({3}, GetParam());
  world()->reduce_scatter(input, output, ReduceOp::sum);
  const std::vector<float> got = output.to_float_vector();
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[static_cast<size_t>(i)],
              static_cast<float>((rank * 3 + i + 1) * (w * (w + 1) / 2)));
  }
}

TEST_P(Collectives, ReduceGivesTheRootTheReductionAndLeavesTheOthers) {
  const int w = world()->world_size(), rank = world()->rank();
  for (int root = 0; root < w; ++root) {
    const Tensor t = rank_values(rank, 4, GetParam());
    world()->reduce_async(t, root, ReduceOp::avg)->wait();
    const std::vector<float> got = t.to_float_vector();
    for (int64_t i = 0; i < 4; ++i) {
      const float expected = rank == root ? static_cast<float>((i + 1) * (w + 1)) / 2.0f
                                          : static_cast<float>((rank + 1) * (i + 1));
      EXPECT_EQ(got[static_cast<size_t>(i)], expected) << "root " << root << " " << i;
    }
  }
  EXPECT_THROW(world()->reduce_async(Tensor::zeros({2}), w, ReduceOp::sum), ValueError);
}

TEST_P(Collectives, AllGatherAndBroadcast) {
  const int w = world()->world_size(), rank = world()->rank();
  const Tensor input = Tensor::full({2}, rank + 1, GetParam());
  const Tensor gathered = Tensor::empty({2 * w}, GetParam());
  world()->all_gather(input, gathered);
  const std::vector<float> got = gathered.to_float_vector();
  for (int r = 0; r < w; ++r) EXPECT_EQ(got[static_cast<size_t>(2 * r + 1)], r + 1.0f);

  const Tensor b = Tensor::full({4}, rank == 1 ? 7.0 : -1.0, GetParam());
  world()->broadcast(b, 1);
  EXPECT_EQ(b.to_float_vector(), std::vector<float>(4, 7.0f));
  world()->barrier();
}

// Two broadcasts in flight at once (ZeRO-3's prefetch), from different roots, each complete after
// its wait.
TEST_P(Collectives, AsyncBroadcastsCompleteOnWait) {
  const int rank = world()->rank();
  const Tensor a = Tensor::full({3}, rank == 0 ? 5.0 : -1.0, GetParam());
  const Tensor b = Tensor::full({5}, rank == 1 ? 6.0 : -1.0, GetParam());
  std::unique_ptr<CommWork> first = world()->broadcast_async(a, 0);
  std::unique_ptr<CommWork> second = world()->broadcast_async(b, 1);
  second->wait();
  first->wait();
  EXPECT_TRUE(first->test());
  EXPECT_EQ(a.to_float_vector(), std::vector<float>(3, 5.0f));
  EXPECT_EQ(b.to_float_vector(), std::vector<float>(5, 6.0f));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Collectives,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// bf16 sums are widened to f32 and rounded once (Note [Reductions of bf16 and f16 over MPI]):
// 1 + 2^-8 + 2^-8 on 3 ranks would round twice in bf16; on 2 ranks 1 + 2^-9 · 2 is exact in f32
// and rounds to 1 + 2^-8 once.
TEST(MpiCommunicator, Bf16SumIsRoundedOnceFromF32) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  const float mine = world()->rank() == 0 ? 1.0f : 0.00390625f;  // 2^-8
  const Tensor t = Tensor::full({1}, mine, DType::bf16);
  world()->all_reduce(t, ReduceOp::sum);
  float expected_f32 = 1.0f + 0.00390625f * static_cast<float>(world()->world_size() - 1);
  uint16_t bits = 0;
  convert_from_f32(&expected_f32, &bits, DType::bf16, 1);
  float expected = 0.0f;
  convert_to_f32(&bits, DType::bf16, &expected, 1);
  EXPECT_EQ(t.to_float_vector()[0], expected);
}

TEST(MpiCommunicator, ScalarsAndRefusals) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  const int w = world()->world_size();
  EXPECT_EQ(world()->all_reduce_scalar(world()->rank() + 1.0, ReduceOp::max), w);
  EXPECT_EQ(world()->all_reduce_scalar(2.0, ReduceOp::avg), 2.0);
  EXPECT_THROW(world()->all_reduce(Tensor::zeros({2}, DType::i64), ReduceOp::avg), ValueError);
  EXPECT_THROW(world()->all_reduce(Tensor::zeros({2}, DType::i32), ReduceOp::sum),
               NotImplementedError);
  EXPECT_THROW(world()->all_reduce(Tensor::zeros({2, 3}).transpose(0, 1), ReduceOp::sum),
               ValueError);
  EXPECT_THROW(world()->reduce_scatter(Tensor::zeros({3}), Tensor::zeros({2}), ReduceOp::sum),
               ValueError);
}

// i64 reduces exactly, in integers: each rank's slot holds a value beyond a double's 53 bits, the
// others 0 (how ZeRO's clipping assembles the norm table, Note [Gradient norms over ranks]).
TEST(MpiCommunicator, I64SumAndMaxAreExact) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  const int w = world()->world_size(), r = world()->rank();
  const int64_t big = (int64_t{1} << 62) + 12345;
  Tensor t = Tensor::zeros({w}, DType::i64);
  t.data<int64_t>()[r] = big - r;
  Tensor m = Tensor::full({1}, static_cast<double>(r), DType::i64);
  world()->all_reduce(t, ReduceOp::sum);
  world()->all_reduce(m, ReduceOp::max);
  for (int i = 0; i < w; ++i) EXPECT_EQ(t.data<int64_t>()[i], big - i) << i;
  EXPECT_EQ(m.data<int64_t>()[0], w - 1);
}

// Each rank's gradient of sum((x_r · W)^2) over its own x_r; after finish() every rank holds the
// average over both ranks' x, computed here locally from both x (with `owners`, ZeRO-2: only the
// gradients this rank owns, the others dropped). Buckets of 32 bytes (the first 16) give each of
// the three parameters a bucket of its own.
void expect_reducer_averages(const std::vector<int>& owners) {
  const int w = world()->world_size();
  manual_seed(3);
  const Tensor a = Tensor::randn({4, 3}).set_requires_grad();
  const Tensor b = Tensor::randn({3, 5}).set_requires_grad();
  const Tensor c = Tensor::randn({5}).set_requires_grad();
  GradientReducer reducer(world(), {{"a", a}, {"b", b}, {"c", c}},
                          {.bucket_cap_bytes = 32, .first_bucket_cap_bytes = 16}, owners);
  EXPECT_EQ(reducer.bucket_count(), 3u);  // c (20 B >= 16), b (60 B >= 32), a (48 B)
  EXPECT_EQ(reducer.bucket_params(0), std::vector<size_t>{2});
  auto grads_for = [&](int rank) {
    const Tensor x = Tensor::full({2, 4}, 0.5 + rank, DType::f32);
    const Tensor y = add(matmul(matmul(x, a), b), c);
    return sum(mul(y, y));
  };
  // Expected: the average of each rank's gradients, without the reducer.
  std::vector<std::vector<float>> expected(3);
  reducer.set_require_sync(false);
  for (int r = 0; r < w; ++r) {
    for (const Tensor* p : {&a, &b, &c}) p->set_grad(Tensor());
    backward(grads_for(r));
    reducer.finish();  // nothing: synchronisation off
    int k = 0;
    for (const Tensor* p : {&a, &b, &c}) {
      const std::vector<float> g = p->grad().to_float_vector();
      expected[static_cast<size_t>(k)].resize(g.size(), 0.0f);
      for (size_t j = 0; j < g.size(); ++j) expected[static_cast<size_t>(k)][j] += g[j];
      ++k;
    }
  }
  for (auto& g : expected) {
    for (float& v : g) v /= static_cast<float>(w);
  }
  for (const Tensor* p : {&a, &b, &c}) p->set_grad(Tensor());
  reducer.set_require_sync(true);
  backward(grads_for(world()->rank()));
  reducer.finish();
  int k = 0;
  for (const Tensor* p : {&a, &b, &c}) {
    if (!owners.empty() && owners[static_cast<size_t>(k)] != world()->rank()) {
      EXPECT_FALSE(p->grad().defined()) << "parameter " << k << " is another rank's";
      ++k;
      continue;
    }
    const std::vector<float> g = p->grad().to_float_vector();
    for (size_t j = 0; j < g.size(); ++j) {
      // The reducer sums the ranks' fp32 gradients in MPI's order and scales by 1/W; the
      // reference adds them rank by rank and divides: an ulp or two apart, hence 1e-5 relative
      // (and 1e-6 absolute for gradients near zero).
      EXPECT_NEAR(g[j], expected[static_cast<size_t>(k)][j],
                  1e-5f * std::abs(expected[static_cast<size_t>(k)][j]) + 1e-6f);
    }
    ++k;
  }
}

TEST(GradientReducer, AveragesEveryBucketOverTheRanks) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  expect_reducer_averages({});
}

TEST(GradientReducer, WithOwnersEachRankKeepsItsOwnAveragesOnly) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  const int w = world()->world_size();
  expect_reducer_averages({0, 1 % w, 0});
}

TEST(GradientReducer, BroadcastGivesEveryRankRootsParameters) {
  if (!world()) GTEST_SKIP() << kNeedsTwoRanks;
  const Tensor p = Tensor::full({3}, world()->rank() + 10.0).set_requires_grad();
  broadcast_parameters(*world(), {p});
  EXPECT_EQ(p.to_float_vector(), std::vector<float>(3, 10.0f));
}

}  // namespace
}  // namespace headroom
