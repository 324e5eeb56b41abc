// DataLoader: batch contents, len and drop_last, seeded shuffling, workers == no workers, and
// resuming from a saved state (see Note [DataLoader determinism]).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/data_loader.h"
#include "data/data_test_helpers.h"
#include "data/permutation.h"

namespace headroom {
namespace {

using data_test::counting_corpus;
using data_test::expect_error;
using data_test::TempDir;

// A batch as plain values: shape, input ids, targets.
struct Values {
  std::vector<int64_t> shape;
  std::vector<int64_t> inputs;
  std::vector<int64_t> targets;
  bool operator==(const Values&) const = default;
};

Values values(const TokenBatch& batch) {
  return {{batch.input_ids.size(0), batch.input_ids.size(1)},
          batch.input_ids.to_int64_vector(),
          batch.targets.to_int64_vector()};
}

// The batches of `epochs` epochs, with an empty entry marking each epoch's end.
std::vector<Values> run_epochs(DataLoader& loader, int epochs) {
  std::vector<Values> out;
  for (int e = 0; e < epochs; ++e) {
    while (auto batch = loader.next()) out.push_back(values(*batch));
    out.push_back({});
  }
  return out;
}

// 10 sequences of T = 4 (tokens 0..40).
PackedSequences ten_sequences(const TempDir& dir) {
  return PackedSequences(counting_corpus(dir, 41), 0, 41, 4);
}

TEST(DataLoader, BatchesHoldInputsAndNextTokenTargets) {
  TempDir dir;
  DataLoader loader(ten_sequences(dir), {.batch_size = 4, .shuffle = false});
  EXPECT_EQ(loader.size(), 3);
  auto batch = loader.next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->input_ids.dtype(), DType::i64);
  EXPECT_EQ(batch->targets.dtype(), DType::i64);
  EXPECT_EQ(batch->input_ids.device(), kCPU);
  EXPECT_EQ(values(*batch).shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(batch->input_ids.to_int64_vector(),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(batch->targets.to_int64_vector(),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}));
  loader.next();
  auto last = loader.next();
  ASSERT_TRUE(last);
  EXPECT_EQ(values(*last).shape, (std::vector<int64_t>{2, 4}));  // 10 = 4 + 4 + 2
  EXPECT_EQ(last->targets.to_int64_vector().back(), 40);
  EXPECT_FALSE(loader.next());
  EXPECT_EQ(loader.state(), (DataLoaderState{1, 0, 42}));
  EXPECT_TRUE(loader.next());  // epoch 1
}

TEST(DataLoader, DropLastDropsTheShortBatch) {
  TempDir dir;
  DataLoader loader(ten_sequences(dir), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  const std::vector<Values> batches = run_epochs(loader, 1);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1].shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(DataLoader(ten_sequences(dir), {.batch_size = 11, .drop_last = true}).size(), 0);
  EXPECT_EQ(DataLoader(ten_sequences(dir), {.batch_size = 11}).size(), 1);
  EXPECT_EQ(DataLoader(ten_sequences(dir), {.batch_size = 5, .drop_last = true}).size(), 2);
}

TEST(EpochPermutation, IsAFixedFunctionOfSeedAndEpoch) {
  const std::vector<int64_t> a = epoch_permutation(1000, 42, 0);
  EXPECT_EQ(a, epoch_permutation(1000, 42, 0));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_NE(a, epoch_permutation(1000, 42, 1));
  EXPECT_NE(a, epoch_permutation(1000, 43, 0));
  // From tools/gen_permutation_golden.py, an independent Python Philox + Fisher-Yates: the order
  // must not change between builds, compilers or machines, or resumed runs would see other
  // batches than they started with. The last case puts bits in the seed's and epoch's high words.
  EXPECT_EQ(epoch_permutation(10, 42, 0), (std::vector<int64_t>{0, 9, 1, 7, 5, 6, 8, 2, 3, 4}));
  EXPECT_EQ(epoch_permutation(10, 42, 3), (std::vector<int64_t>{9, 7, 6, 2, 3, 8, 1, 0, 5, 4}));
  EXPECT_EQ(epoch_permutation(25, (uint64_t{1} << 40) + 7, (int64_t{1} << 33) + 1),
            (std::vector<int64_t>{0,  14, 3,  23, 19, 16, 18, 4,  12, 8, 17, 5, 20,
                                  21, 22, 15, 9,  1,  10, 11, 13, 7,  2, 6,  24}));
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
  EXPECT_EQ(epoch_permutation(1, 1, 0), (std::vector<int64_t>{0}));
}

TEST(DataLoader, ShuffleIsDeterministicAndDiffersByEpoch) {
  TempDir dir;
  DataLoader a(ten_sequences(dir), {.batch_size = 3, .seed = 7});
  DataLoader b(ten_sequences(dir), {.batch_size = 3, .seed = 7});
  const std::vector<Values> run_a = run_epochs(a, 3);
  EXPECT_EQ(run_a, run_epochs(b, 3));
  // 4 batches and an end marker per epoch; each epoch visits every sequence once.
  ASSERT_EQ(run_a.size(), 15u);
  std::vector<std::vector<int64_t>> firsts(3);
  for (int e = 0; e < 3; ++e) {
    std::multiset<int64_t> starts;
    for (int i = 0; i < 4; ++i) {
      const Values& v = run_a[static_cast<size_t>(e * 5 + i)];
      for (int64_t r = 0; r < v.shape[0]; ++r) starts.insert(v.inputs[static_cast<size_t>(r * 4)]);
    }
    EXPECT_EQ(starts, (std::multiset<int64_t>{0, 4, 8, 12, 16, 20, 24, 28, 32, 36}));
    firsts[static_cast<size_t>(e)] = run_a[static_cast<size_t>(e * 5)].inputs;
  }
  EXPECT_NE(firsts[0], firsts[1]);
  EXPECT_NE(firsts[1], firsts[2]);
  DataLoader other_seed(ten_sequences(dir), {.batch_size = 3, .seed = 8});
  EXPECT_NE(run_epochs(other_seed, 1)[0], run_a[0]);
  // batch_at gives what next() gives at that position.
  EXPECT_EQ(values(a.batch_at(2, 1)), run_a[11]);
}

TEST(DataLoader, WorkersGiveExactlyTheBatchesOfNoWorkers) {
  TempDir dir;
  const PackedSequences data(counting_corpus(dir, 2000), 0, 2000, 8);  // 249 sequences
  DataLoader serial(data, {.batch_size = 5, .seed = 3});
  const std::vector<Values> expected = run_epochs(serial, 3);
  for (int64_t workers : {1, 2, 3, 7}) {
    for (int64_t prefetch : {1, 2, 5}) {
      for (bool persistent : {false, true}) {
        SCOPED_TRACE(
            str_cat(workers, " workers, prefetch ", prefetch, ", persistent ", persistent));
        DataLoader loader(data, {.batch_size = 5,
                                 .seed = 3,
                                 .num_workers = workers,
                                 .prefetch_factor = prefetch,
                                 .persistent_workers = persistent,
                                 .pin_memory = true});
        EXPECT_EQ(run_epochs(loader, 3), expected);
      }
    }
  }
  DataLoader unshuffled(data, {.batch_size = 5, .shuffle = false, .num_workers = 2});
  DataLoader unshuffled_serial(data, {.batch_size = 5, .shuffle = false});
  EXPECT_EQ(run_epochs(unshuffled, 2), run_epochs(unshuffled_serial, 2));
}

TEST(DataLoader, AbandoningAnEpochMidwayWithWorkersIsSafe) {
  TempDir dir;
  const PackedSequences data(counting_corpus(dir, 2000), 0, 2000, 8);
  DataLoader serial(data, {.batch_size = 5});
  DataLoader loader(data, {.batch_size = 5, .num_workers = 3, .persistent_workers = true});
  for (int i = 0; i < 4; ++i) loader.next();
  loader.set_epoch(2);
  serial.set_epoch(2);
  EXPECT_EQ(run_epochs(loader, 1), run_epochs(serial, 1));
  DataLoader dropped(data, {.batch_size = 5, .num_workers = 4, .prefetch_factor = 3});
  dropped.next();  // destroyed with workers busy and queues full
}

TEST(DataLoader, ResumedLoaderContinuesWithTheNextBatch) {
  TempDir dir;
  const PackedSequences data(counting_corpus(dir, 1000), 0, 1000, 8);  // 124 sequences
  const DataLoaderOptions options{.batch_size = 8, .seed = 11};        // 16 batches, the last of 4
  DataLoader uninterrupted(data, options);
  const std::vector<Values> expected = run_epochs(uninterrupted, 3);  // 17 entries per epoch

  for (int64_t workers : {0, 2}) {
    for (int stop_after : {0, 5, 16, 17, 20, 33}) {
      SCOPED_TRACE(str_cat(workers, " workers, stop after ", stop_after, " entries"));
      DataLoaderOptions with_workers = options;
      with_workers.num_workers = workers;
      DataLoader first(data, with_workers);
      std::vector<Values> seen;
      for (int i = 0; i < stop_after; ++i) {
        auto batch = first.next();
        seen.push_back(batch ? values(*batch) : Values{});
      }
      // Through JSON, as a checkpoint stores it.
      const std::string saved = first.state().to_json().dump();
      const DataLoaderState state =
          DataLoaderState::from_json(nlohmann::json::parse(saved), "trainer_state.json");
      EXPECT_EQ(state, first.state());
      DataLoaderOptions other_seed = with_workers;
      other_seed.seed = 999;  // the saved seed wins
      DataLoader resumed(data, other_seed, state);
      while (seen.size() < expected.size()) {
        auto batch = resumed.next();
        seen.push_back(batch ? values(*batch) : Values{});
      }
      EXPECT_EQ(seen, expected);
    }
  }
}

TEST(DataLoaderState, JsonFieldsAndErrors) {
  const DataLoaderState state{2, 17, 1234};
  EXPECT_EQ(state.to_json(), nlohmann::json::parse(R"({"epoch": 2, "batch_index": 17,
                                                       "seed": 1234})"));
  EXPECT_EQ(DataLoaderState::from_json(state.to_json(), "x"), state);
  expect_error<ValueError>(
      [] {
        DataLoaderState::from_json(nlohmann::json::parse(R"({"epoch": 1, "seed": 2})"), "s.json");
      },
      {"s.json", "no \"batch_index\" field"});
  expect_error<ValueError>(
      [] {
        DataLoaderState::from_json(
            nlohmann::json::parse(R"({"epoch": -1, "batch_index": 0, "seed": 2})"), "s.json");
      },
      {"s.json", "\"epoch\" is number -1, not a non-negative integer"});
  expect_error<ValueError>(
      [] {
        DataLoaderState::from_json(
            nlohmann::json::parse(R"({"epoch": 0, "batch_index": "3", "seed": 2})"), "s.json");
      },
      {"s.json", "\"batch_index\" is string"});
  expect_error<ValueError>([] { DataLoaderState::from_json(nlohmann::json::array(), "s.json"); },
                           {"s.json", "not an object"});
}

TEST(DataLoader, BadOptionsAndStatesAreErrors) {
  TempDir dir;
  const PackedSequences data = ten_sequences(dir);
  expect_error<ValueError>([&] { DataLoader(data, {.batch_size = 0}); }, {"batch_size is 0"});
  expect_error<ValueError>([&] { DataLoader(data, {.prefetch_factor = 2}); },
                           {"dataloader_prefetch_factor is 2", "dataloader_num_workers > 0"});
  expect_error<ValueError>([&] { DataLoader(data, {.num_workers = 1, .prefetch_factor = 0}); },
                           {"dataloader_prefetch_factor is 0", "at least 1"});
  expect_error<ValueError>([&] { DataLoader(data, {.persistent_workers = true}); },
                           {"dataloader_persistent_workers", "dataloader_num_workers > 0"});
  expect_error<ValueError>([&] { DataLoader(data, {.num_workers = -1}); },
                           {"dataloader_num_workers is -1"});
  expect_error<ValueError>(
      [&] {
        DataLoader(data, {.batch_size = 4}, DataLoaderState{0, 4, 42});
      },
      {"batch_index is 4", "outside 0..3"});
  // An epoch whose batch count overflows the batches consumed (issue 19).
  expect_error<ValueError>(
      [&] {
        DataLoader(data, {.batch_size = 4}, DataLoaderState{int64_t{1} << 61, 0, 42});
      },
      {"epoch is 2305843009213693952", "2^62"});
  EXPECT_NO_THROW(DataLoader(data, {.batch_size = 4}, DataLoaderState{1000000, 3, 42}));
}

}  // namespace
}  // namespace headroom
