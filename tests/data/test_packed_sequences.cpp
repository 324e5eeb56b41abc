// Packing a token stream into max_seq_length + 1 windows and the train / eval split arithmetic
// (see Note [Packing and the eval split]).
#include <gtest/gtest.h>

#include "data/data_test_helpers.h"
#include "data/packed_sequences.h"

namespace headroom {
namespace {

using data_test::counting_corpus;
using data_test::expect_error;
using data_test::TempDir;

std::vector<int64_t> sequence(const PackedSequences& packed, int64_t index) {
  std::vector<int64_t> out(static_cast<size_t>(packed.seq_length() + 1));
  packed.copy_sequence(index, out.data());
  return out;
}

TEST(PackedSequences, WindowsOfTPlusOneAdvanceByT) {
  TempDir dir;
  const auto corpus = counting_corpus(dir, 11);  // tokens 0..10
  const PackedSequences packed(corpus, 0, 11, 3);
  ASSERT_EQ(packed.size(), 3);  // floor((11 - 1) / 3)
  EXPECT_EQ(sequence(packed, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(sequence(packed, 1), (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(sequence(packed, 2), (std::vector<int64_t>{6, 7, 8, 9}));  // token 10 is dropped
  EXPECT_THROW(sequence(packed, 3), IndexError);

  const PackedSequences middle(corpus, 4, 11, 2);
  ASSERT_EQ(middle.size(), 3);
  EXPECT_EQ(sequence(middle, 2), (std::vector<int64_t>{8, 9, 10}));
  EXPECT_EQ(PackedSequences(corpus, 5, 5, 2).size(), 0);
  EXPECT_EQ(PackedSequences(corpus, 5, 7, 2).size(), 0);
  EXPECT_EQ(PackedSequences(corpus, 5, 8, 2).size(), 1);
  EXPECT_THROW(PackedSequences(corpus, 0, 12, 2), IndexError);
}

TEST(PackedSequences, StrideOfTPlusOneGivesDisjointWindows) {
  TempDir dir;
  const auto corpus = counting_corpus(dir, 11);  // tokens 0..10
  const PackedSequences windows(corpus, 0, 11, 3, /*stride=*/4);
  ASSERT_EQ(windows.size(), 2);  // floor(11 / 4): tokens 8..10 do not fill a window
  EXPECT_EQ(sequence(windows, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(sequence(windows, 1), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(PackedSequences(corpus, 3, 11, 3, 4).size(), 2);       // exactly two windows
  EXPECT_THROW(PackedSequences(corpus, 0, 11, 3, 5), ValueError);  // would skip tokens
}

TEST(SplitTrainEval, EvalIsTheTailOfTheStream) {
  TempDir dir;
  const auto corpus = counting_corpus(dir, 1000);
  const TrainEvalSplit split = split_train_eval(corpus, 9, 10.0);
  EXPECT_EQ(split.train.begin(), 0);
  EXPECT_EQ(split.train.end(), 900);
  EXPECT_EQ(split.eval.begin(), 900);
  EXPECT_EQ(split.eval.end(), 1000);
  EXPECT_EQ(split.train.size(), 99);  // floor(899 / 9)
  EXPECT_EQ(split.eval.size(), 11);   // floor(99 / 9)
  EXPECT_EQ(sequence(split.eval, 0)[0], 900 % 256);
  // The last training sequence ends before the first eval token.
  EXPECT_LE(split.train.begin() + (split.train.size() - 1) * 9 + 10, split.eval.begin());
}

TEST(SplitTrainEval, AtLeastOneEvalSequenceWhenTheCorpusAllows) {
  TempDir dir;
  const TrainEvalSplit small = split_train_eval(counting_corpus(dir, 50), 9, 5.0);
  EXPECT_EQ(small.eval.end() - small.eval.begin(), 10);  // 5% is 2 tokens, raised to T + 1
  EXPECT_EQ(small.eval.size(), 1);
  EXPECT_EQ(small.train.size(), 4);  // floor(39 / 9)

  const TrainEvalSplit exact = split_train_eval(counting_corpus(dir, 20), 9, 5.0);
  EXPECT_EQ(exact.train.size(), 1);
  EXPECT_EQ(exact.eval.size(), 1);

  const TrainEvalSplit too_small = split_train_eval(counting_corpus(dir, 19), 9, 5.0);
  EXPECT_EQ(too_small.train.size(), 2);  // all 19 tokens train: floor(18 / 9)
  EXPECT_TRUE(too_small.eval.empty());

  const TrainEvalSplit none = split_train_eval(counting_corpus(dir, 1000), 9, 0.0);
  EXPECT_EQ(none.train.end(), 1000);
  EXPECT_TRUE(none.eval.empty());
}

TEST(SplitTrainEval, TooSmallCorpusNamesTheFileAndCounts) {
  TempDir dir;
  const auto corpus = counting_corpus(dir, 5);
  expect_error<ValueError>([&] { split_train_eval(corpus, 9, 5.0); },
                           {corpus->source(), "has 5 tokens", "max_seq_length 9 needs 10 tokens"});
  const auto twenty = counting_corpus(dir, 20);
  expect_error<ValueError>([&] { split_train_eval(twenty, 9, 95.0); },
                           {twenty->source(), "19 tokens) for eval", "1 are left", "needs 10"});
  expect_error<ValueError>([&] { split_train_eval(twenty, 9, 100.0); },
                           {"validation_split_percentage is 100", "[0, 100)"});
  expect_error<ValueError>([&] { split_train_eval(twenty, 0, 5.0); }, {"max_seq_length is 0"});
}

}  // namespace
}  // namespace headroom
