// NEFTune (transformers' neftune_post_forward_hook): uniform noise of magnitude
// alpha / sqrt(T * d) on the input embeddings, in training mode only; evaluation is unaffected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/generator.h"
#include "core/grad_mode.h"
#include "nn/layers.h"
#include "ops/embedding.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

struct NoiseStats {
  double max_abs = 0.0, mean = 0.0, variance = 0.0;
};

// The noise the embedding added to `ids` [B, T] in training mode.
NoiseStats noise_stats(const Embedding& layer, int64_t batch, int64_t length) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * length));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % 50);
  const Tensor input = Tensor::from_ints(ids, {batch, length});
  const std::vector<float> clean = embedding(layer.weight(), input).to_float_vector();
  const std::vector<float> noisy = layer.forward(input).to_float_vector();
  NoiseStats stats;
  double sum = 0.0, squares = 0.0;
  for (size_t i = 0; i < clean.size(); ++i) {
    const double noise = static_cast<double>(noisy[i]) - clean[i];
    stats.max_abs = std::max(stats.max_abs, std::fabs(noise));
    sum += noise;
    squares += noise * noise;
  }
  const double n = static_cast<double>(clean.size());
  stats.mean = sum / n;
  stats.variance = squares / n - stats.mean * stats.mean;
  return stats;
}

TEST(Neftune, UniformNoiseOfMagnitudeAlphaOverSqrtLengthTimesHidden) {
  NoGradGuard no_grad;
  default_generator().manual_seed(7);
  const int64_t hidden = 32;
  Embedding embedding(50, hidden, kCPU);
  embedding.weight().normal_(0.0, 1.0);
  embedding.set_neftune_noise_alpha(5.0);
  for (int64_t length : {4, 16}) {
    SCOPED_TRACE(length);
    const double magnitude = 5.0 / std::sqrt(static_cast<double>(length * hidden));
    const NoiseStats stats = noise_stats(embedding, 64, length);
    // U(-m, m): |noise| <= m (plus the float rounding of the sum), reaching near m; mean 0;
    // variance m^2 / 3 (8192 or 32768 draws: a few percent of sampling error).
    EXPECT_LE(stats.max_abs, magnitude * (1 + 1e-5) + 1e-6);
    EXPECT_GE(stats.max_abs, magnitude * 0.99);
    EXPECT_NEAR(stats.mean, 0.0, magnitude * 0.03);
    EXPECT_NEAR(stats.variance, magnitude * magnitude / 3, magnitude * magnitude / 3 * 0.1);
  }
}

TEST(Neftune, OnlyInTrainingMode) {
  NoGradGuard no_grad;
  Embedding embedding(50, 16, kCPU);
  embedding.weight().normal_(0.0, 1.0);
  embedding.set_neftune_noise_alpha(5.0);
  embedding.eval();
  EXPECT_EQ(noise_stats(embedding, 4, 8).max_abs, 0.0) << "eval mode adds no noise";
  embedding.train();
  EXPECT_GT(noise_stats(embedding, 4, 8).max_abs, 0.0);
  embedding.set_neftune_noise_alpha(0.0);
  EXPECT_EQ(noise_stats(embedding, 4, 8).max_abs, 0.0) << "alpha 0 adds no noise";
}

// The Trainer puts the noise on the model's input embedding: training losses change, evaluate()
// (eval mode) gives exactly the loss of the same model without NEFTune.
TEST(Neftune, TrainerTrainsWithNoiseAndEvaluatesWithout) {
  test_data::TempDir tmp("neftune");
  TrainingArguments args = test_data::tiny_training_args(tmp.path(), /*dropout=*/0.0);
  args.save_strategy = "no";
  TrainingArguments noisy_args = args;
  noisy_args.neftune_noise_alpha = 5.0;
  Trainer plain(args), noisy(noisy_args);
  EXPECT_EQ(noisy.model().input_embeddings().neftune_noise_alpha(), 5.0);
  EXPECT_EQ(plain.model().input_embeddings().neftune_noise_alpha(), 0.0);
  const EvalResult plain_eval = plain.evaluate(), noisy_eval = noisy.evaluate();
  ASSERT_GT(plain_eval.tokens, 0);
  EXPECT_EQ(noisy_eval.loss, plain_eval.loss);
  EXPECT_TRUE(noisy.model().is_training()) << "evaluate() restores training mode";
  const double plain_loss = plain.step().loss, noisy_loss = noisy.step().loss;
  EXPECT_NE(noisy_loss, plain_loss);
  EXPECT_NEAR(noisy_loss, plain_loss, 0.5) << "the noise is small";
}

}  // namespace
}  // namespace headroom
