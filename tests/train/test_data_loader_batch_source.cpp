// The trainer's data source over data/: the eval tail, per-epoch shuffles that roll over, a
// resumable position that refuses other data, max_eval_samples, and the token cache in output_dir.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "data/data_test_helpers.h"
#include "train/data_loader_batch_source.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using data_test::counting_corpus;
using data_test::expect_error;

// The first token of each row: with counting data, sequence i starts at token i * T.
std::vector<int64_t> row_starts(const TokenBatch& batch) {
  const std::vector<int64_t> ids = batch.input_ids.to_int64_vector();
  const int64_t t = batch.input_ids.shape()[1];
  std::vector<int64_t> starts;
  for (size_t r = 0; r < ids.size(); r += static_cast<size_t>(t)) starts.push_back(ids[r]);
  return starts;
}

TEST(DataLoaderBatchSource, HoldsOutTheTailAndShufflesTheRestPerEpoch) {
  data_test::TempDir dir;
  // 105 tokens, T = 9, 20%: eval = the last 21 tokens (2 sequences from 84), train = the first
  // 84 (9 sequences), in batches of 3.
  DataLoaderBatchSource source(split_train_eval(counting_corpus(dir, 105), 9, 20.0),
                               {.batch_size = 3, .seed = 7});
  EXPECT_EQ(source.train_sequences(), 9);
  EXPECT_EQ(source.eval_sequences(), 2);
  EXPECT_EQ(source.batches_per_epoch(), 3);
  std::vector<int64_t> epoch0, epoch1;
  for (int b = 0; b < 3; ++b) {
    const TokenBatch batch = source.next_batch();
    ASSERT_EQ(batch.input_ids.shape(), Shape({3, 9}));
    EXPECT_EQ(batch.targets.to_int64_vector()[0], batch.input_ids.to_int64_vector()[0] + 1);
    for (int64_t start : row_starts(batch)) epoch0.push_back(start);
  }
  for (int b = 0; b < 3; ++b) {
    for (int64_t start : row_starts(source.next_batch())) epoch1.push_back(start);
  }
  EXPECT_EQ(source.batches_consumed(), 6);
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()),
            std::set<int64_t>({0, 9, 18, 27, 36, 45, 54, 63, 72}));
  EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.end()).size(), 9u);
  EXPECT_NE(epoch0, epoch1);
  ASSERT_EQ(source.eval_batch_count(4), 1);
  EXPECT_EQ(row_starts(source.eval_batch(0, 4)), std::vector<int64_t>({84, 93}));
  EXPECT_EQ(row_starts(source.eval_batch(1, 1)), std::vector<int64_t>({93}));
  EXPECT_THROW(source.eval_batch(2, 1), IndexError);

  DataLoaderBatchSource truncated(split_train_eval(counting_corpus(dir, 105), 9, 20.0),
                                  {.batch_size = 3}, /*max_eval_samples=*/1);
  EXPECT_EQ(truncated.eval_sequences(), 1);
  EXPECT_EQ(row_starts(truncated.eval_batch(0, 4)), std::vector<int64_t>({84}));
}

TEST(DataLoaderBatchSource, RestoredStateContinuesWithTheSameBatches) {
  data_test::TempDir dir;
  auto corpus = counting_corpus(dir, 200);  // T = 9: 22 sequences, 8 batches of 3
  DataLoaderBatchSource a(split_train_eval(corpus, 9, 0.0), {.batch_size = 3, .seed = 3});
  for (int i = 0; i < 9; ++i) a.next_batch();  // past the end of epoch 0
  // Workers assemble the same batches (Note [DataLoader determinism]).
  DataLoaderBatchSource b(split_train_eval(corpus, 9, 0.0),
                          {.batch_size = 3, .seed = 3, .num_workers = 2});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.batches_consumed(), 9);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(a.next_batch().input_ids.to_int64_vector(),
              b.next_batch().input_ids.to_int64_vector());
  }
  DataLoaderBatchSource other_data(split_train_eval(counting_corpus(dir, 300), 9, 0.0),
                                   {.batch_size = 3, .seed = 3});
  expect_error<ValueError>([&] { other_data.load_state_dict(a.state_dict()); },
                           {"train_sequences 22", "33"});
  DataLoaderBatchSource other_length(split_train_eval(corpus, 11, 0.0), {.batch_size = 3});
  expect_error<ValueError>([&] { other_length.load_state_dict(a.state_dict()); },
                           {"seq_length 9", "11"});
  expect_error<ValueError>([&] { other_length.load_state_dict({{"epoch", 0}}); }, {"batch_index"});
}

TEST(DataLoaderBatchSource, TooFewSequencesForOneBatchWithDropLastNamesTheData) {
  data_test::TempDir dir;
  expect_error<ValueError>(
      [&] {
        DataLoaderBatchSource(split_train_eval(counting_corpus(dir, 50), 9, 0.0),
                              {.batch_size = 8, .drop_last = true});
      },
      {"counting_50.txt", "5 training sequences", "batch of 8"});
}

TEST(DataLoaderBatchSource, TrainerDefaultCachesTokensAndHonoursMaxEvalSamples) {
  test_data::TempDir tmp("data_loader_batch_source");
  TrainingArguments args = test_data::tiny_training_args(tmp.path());
  Trainer all(args);
  const int64_t all_tokens = all.evaluate().tokens;
  args.max_eval_samples = 1;
  Trainer one(args);
  EXPECT_EQ(one.evaluate().tokens, 16);
  EXPECT_GT(all_tokens, 16);
  int cache_files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(args.output_dir) / "cache")) {
    cache_files += entry.path().filename().string().starts_with("tokens-");
  }
  EXPECT_EQ(cache_files, 1);
}

}  // namespace
}  // namespace headroom
