// The training tests' data and model: a fixed English text as byte tokens, and a GPT-2 small
// enough to learn it in a few hundred CPU steps.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/model_config.h"

namespace headroom::test_data {

inline constexpr char kTinyText[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope, it was the "
    "winter of despair, we had everything before us, we had nothing before us, we were all going "
    "direct to Heaven, we were all going direct the other way.";

// Vocabulary 256 (bytes), context 32, d 48, 2 layers, 4 heads, no dropout.
inline GPT2Config tiny_text_gpt2() {
  GPT2Config config;
  config.vocab_size = 256;
  config.n_positions = 32;
  config.n_embd = 48;
  config.n_layer = 2;
  config.n_head = 4;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  return config;
}

// `batch` windows of `context` + 1 bytes at a fixed stride that depends on the step: input ids
// and next-byte targets, [batch, context] each.
inline std::pair<Tensor, Tensor> tiny_text_batch(int step, int64_t batch, int64_t context) {
  const std::string text(kTinyText);
  std::vector<int64_t> ids, targets;
  for (int64_t b = 0; b < batch; ++b) {
    const size_t start = static_cast<size_t>((step * batch + b) * 13) % (text.size() - context - 1);
    for (int64_t t = 0; t < context; ++t) {
      ids.push_back(static_cast<unsigned char>(text[start + t]));
      targets.push_back(static_cast<unsigned char>(text[start + t + 1]));
    }
  }
  return {Tensor::from_ints(ids, {batch, context}), Tensor::from_ints(targets, {batch, context})};
}

}  // namespace headroom::test_data
