// The training loop behind `headroom train` and the evaluation behind `headroom eval`.
#pragma once

#include <cstdint>
#include <string>

#include "train/training_arguments.h"

namespace headroom {

// Runs `headroom train` with `args`; returns the process exit code (0, or 130 after SIGINT).
int run_training(const TrainingArguments& args);

struct EvalResult {
  double loss = 0.0;        // mean cross-entropy over every predicted token
  double perplexity = 0.0;  // exp(loss)
  int64_t tokens = 0;       // predicted tokens
};

// `headroom eval`: the data's token stream cut, in order, into consecutive windows of
// max_seq_length + 1 tokens (the incomplete tail dropped), scored by `model` (a preset or a
// model directory) in batches of `batch_size` windows.
EvalResult evaluate_file(const std::string& model, const std::string& data,
                         int64_t max_seq_length, int64_t batch_size,
                         const std::string& device = "auto");

}  // namespace headroom
