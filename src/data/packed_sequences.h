// Fixed-length training examples cut from a token stream, and the train / eval split of a corpus.
//
// Note [Packing and the eval split]
// Sequence i of a range [begin, end) of the stream is the max_seq_length + 1 tokens starting at
// begin + i * max_seq_length: input_ids are its first T tokens, targets its last T (the next
// token of each input). Consecutive sequences share one token, as llm.c's loader reads B*T + 1
// tokens and advances by B*T, so every token of the range but the first is a target exactly once
// (run_clm's group_texts cuts disjoint blocks and shifts inside the model, which leaves the first
// token of each block untargeted). A range of n tokens holds floor((n - 1) / T) sequences; the
// tail that does not fill one is dropped, as group_texts drops its remainder.
//
// The eval split is the last validation_split_percentage of the token stream, cut from the end
// as run_clm's train[p%:] slice is, so eval and train tokens never overlap: eval gets
// floor(n * pct / 100) tokens, raised to T + 1 (one sequence) when that is smaller and the rest
// still holds a training sequence; train gets the tokens before it. Taking the tail rather than
// random documents keeps the split a pure function of the stream (no seed), the same on every
// machine and for any shuffle seed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/token_corpus.h"

namespace headroom {

class PackedSequences {
 public:
  PackedSequences() = default;
  // The sequences of tokens [begin, end) of `tokens`, each max_seq_length + 1 long, starting
  // every `stride` tokens: max_seq_length (the default) packs for training as the Note says;
  // max_seq_length + 1 gives the disjoint windows `headroom eval` scores.
  PackedSequences(std::shared_ptr<const TokenCorpus> tokens, int64_t begin, int64_t end,
                  int64_t max_seq_length, int64_t stride = 0);

  int64_t size() const { return num_sequences_; }
  bool empty() const { return num_sequences_ == 0; }
  int64_t seq_length() const { return seq_length_; }  // T: the length of input_ids and targets
  int64_t begin() const { return begin_; }            // token range in the stream
  int64_t end() const { return end_; }
  const std::shared_ptr<const TokenCorpus>& tokens() const { return tokens_; }

  // Writes sequence `index`'s T + 1 tokens to out[0..T].
  void copy_sequence(int64_t index, int64_t* out) const;

 private:
  std::shared_ptr<const TokenCorpus> tokens_;
  int64_t begin_ = 0;
  int64_t end_ = 0;
  int64_t seq_length_ = 0;
  int64_t stride_ = 0;
  int64_t num_sequences_ = 0;
};

struct TrainEvalSplit {
  PackedSequences train;
  PackedSequences eval;  // empty when validation_split_percentage is 0 or the corpus is too small
};

// Splits the stream as Note [Packing and the eval split] says. ValueError naming the data path,
// its token count and the count needed when the training part cannot hold one sequence, or when
// max_seq_length < 1 or validation_split_percentage is outside [0, 100).
TrainEvalSplit split_train_eval(std::shared_ptr<const TokenCorpus> tokens, int64_t max_seq_length,
                                double validation_split_percentage);

}  // namespace headroom
