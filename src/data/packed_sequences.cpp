// Packing a token range into sequences and splitting off the eval tail
// (see Note [Packing and the eval split]).
#include "data/packed_sequences.h"

#include <cmath>
#include <utility>

#include "core/error.h"

namespace headroom {

PackedSequences::PackedSequences(std::shared_ptr<const TokenCorpus> tokens, int64_t begin,
                                 int64_t end, int64_t max_seq_length, int64_t stride)
    : tokens_(std::move(tokens)),
      begin_(begin),
      end_(end),
      seq_length_(max_seq_length),
      stride_(stride == 0 ? max_seq_length : stride) {
  if (tokens_ == nullptr) throw ValueError("PackedSequences: no token corpus");
  if (max_seq_length < 1) {
    throw ValueError(str_cat("max_seq_length is ", max_seq_length, ", it must be at least 1"));
  }
  if (begin < 0 || begin > end || end > tokens_->size()) {
    throw IndexError(str_cat(tokens_->source(), ": token range [", begin, ", ", end,
                             ") is outside the stream of ", tokens_->size()));
  }
  if (stride_ < 1 || stride_ > max_seq_length + 1) {
    throw ValueError(
        str_cat("PackedSequences: stride ", stride_, " is outside [1, ", max_seq_length + 1, "]"));
  }
  // Sequence i spans [begin + i * stride, begin + i * stride + T + 1).
  const int64_t length = end - begin;
  num_sequences_ = length > max_seq_length ? (length - max_seq_length - 1) / stride_ + 1 : 0;
}

void PackedSequences::copy_sequence(int64_t index, int64_t* out) const {
  if (index < 0 || index >= num_sequences_) {
    throw IndexError(str_cat(tokens_ ? tokens_->source() : "PackedSequences", ": sequence ", index,
                             " is outside 0..", num_sequences_ - 1));
  }
  tokens_->copy_to(begin_ + index * stride_, seq_length_ + 1, out);
}

TrainEvalSplit split_train_eval(std::shared_ptr<const TokenCorpus> tokens, int64_t max_seq_length,
                                double validation_split_percentage) {
  if (tokens == nullptr) throw ValueError("split_train_eval: no token corpus");
  if (max_seq_length < 1) {
    throw ValueError(str_cat("max_seq_length is ", max_seq_length, ", it must be at least 1"));
  }
  if (!(validation_split_percentage >= 0.0 && validation_split_percentage < 100.0)) {
    throw ValueError(str_cat("validation_split_percentage is ", validation_split_percentage,
                             ", it must be in [0, 100)"));
  }
  const int64_t n = tokens->size();
  const int64_t one = max_seq_length + 1;  // tokens of one sequence
  if (n < one) {
    throw ValueError(str_cat("data '", tokens->source(), "' has ", n, " tokens, too few for one ",
                             "training sequence: max_seq_length ", max_seq_length, " needs ", one,
                             " tokens"));
  }
  int64_t eval_tokens = 0;
  if (validation_split_percentage > 0.0) {
    eval_tokens = static_cast<int64_t>(
        std::floor(static_cast<double>(n) * validation_split_percentage / 100.0));
    if (eval_tokens < one) eval_tokens = n - one >= one ? one : 0;
    if (n - eval_tokens < one) {
      throw ValueError(str_cat("data '", tokens->source(), "' has ", n,
                               " tokens; after holding out ", validation_split_percentage, "% (",
                               eval_tokens, " tokens) for eval, ", n - eval_tokens,
                               " are left, too few for one training sequence: max_seq_length ",
                               max_seq_length, " needs ", one, " tokens"));
    }
  }
  const int64_t split = n - eval_tokens;
  TrainEvalSplit result;
  result.train = PackedSequences(tokens, 0, split, max_seq_length);
  result.eval = PackedSequences(tokens, split, n, max_seq_length);
  return result;
}

}  // namespace headroom
