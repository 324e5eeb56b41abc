// End to end: a small GPT-2 trained with fp32 AdamW on a fixed text learns it, and the run is
// reproducible bit for bit for a fixed seed and thread count.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>

#include "autograd/engine.h"
#include "nn/gpt2.h"
#include "optim/adamw.h"

namespace headroom {
namespace {

const char kText[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope, it was the "
    "winter of despair, we had everything before us, we had nothing before us, we were all going "
    "direct to Heaven, we were all going direct the other way.";

// Byte-level tokens: windows of context + 1 bytes at a fixed stride, inputs and next-byte targets.
std::vector<float> train(int steps) {
  GPT2Config config;
  config.vocab_size = 256;
  config.n_positions = 32;
  config.n_embd = 48;
  config.n_layer = 2;
  config.n_head = 4;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  GPT2LMHeadModel model(config, kCPU, /*seed=*/42);
  AdamWOptions options;
  options.lr = 3e-3;
  options.weight_decay = 0.0;
  AdamW optimizer(model.named_parameters(), options);

  const std::string text(kText);
  const int64_t batch = 8, context = 32;
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> ids, targets;
    for (int64_t b = 0; b < batch; ++b) {
      const size_t start = static_cast<size_t>((step * batch + b) * 13) % (text.size() - context - 1);
      for (int64_t t = 0; t < context; ++t) {
        ids.push_back(static_cast<unsigned char>(text[start + t]));
        targets.push_back(static_cast<unsigned char>(text[start + t + 1]));
      }
    }
    const Tensor loss = model.loss(Tensor::from_ints(ids, {batch, context}),
                                   Tensor::from_ints(targets, {batch, context}));
    losses.push_back(static_cast<float>(loss.item()));
    backward(loss);
    optimizer.step();
    optimizer.zero_grad();
  }
  return losses;
}

TEST(Training, SmallGpt2LearnsAFixedTextReproducibly) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  const std::vector<float> first = train(400);
  const std::vector<float> second = train(400);
  omp_set_num_threads(threads);
  EXPECT_NEAR(first.front(), std::log(256.0f), 0.1f);  // HF init: near-uniform predictions
  float tail = 0.0f;
  for (size_t i = first.size() - 5; i < first.size(); ++i) tail += first[i] / 5;
  // Recorded: 5.568 at step 0, a plateau near 2.7 (character frequencies only) until about
  // step 200, then 1.11 over the last five steps once attention picks up the context.
  EXPECT_LT(tail, 1.4f) << "the model did not learn the text";
  EXPECT_EQ(first, second) << "training is not reproducible";
}

}  // namespace
}  // namespace headroom
