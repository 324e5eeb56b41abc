// End to end: a small GPT-2 trained with fp32 AdamW on a fixed text learns it, and the run is
// reproducible bit for bit for a fixed seed and thread count.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>

#include "autograd/engine.h"
#include "nn/gpt2.h"
#include "nn/tiny_text.h"
#include "optim/adamw.h"

namespace headroom {
namespace {

std::vector<float> train(int steps) {
  GPT2LMHeadModel model(test_data::tiny_text_gpt2(), kCPU, /*seed=*/42);
  AdamWOptions options;
  options.lr = 3e-3;
  options.weight_decay = 0.0;
  AdamW optimizer(model.named_parameters(), options);
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    const auto [ids, targets] = test_data::tiny_text_batch(step, 8, 32);
    const Tensor loss = model.loss(ids, targets);
    losses.push_back(static_cast<float>(loss.item()));
    backward(loss);
    optimizer.step();
    optimizer.zero_grad();
  }
  return losses;
}

// Note [Leaving the plateau]
// The loss sits on a plateau near 2.7 (character frequencies only) until attention picks up the
// context, and when it leaves depends on rounding: at seed 42 about step 240 (the loss first below
// 2.0), at seeds 1, 2 and 3 at steps 314, 325 and 233, and under ASan + UBSan builds later than
// step 400, where this test used to stop (issue 19, defect 16). After 600 steps the mean loss
// of the last 100 was 0.28 to 0.54 over those four seeds, far below the 1.4 asked here.
TEST(Training, SmallGpt2LearnsAFixedTextReproducibly) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  const std::vector<float> first = train(600);
  // Bit-for-bit reproducibility shows in any prefix; a shorter second run keeps the test short.
  const std::vector<float> second = train(150);
  omp_set_num_threads(threads);
  EXPECT_NEAR(first.front(), std::log(256.0f), 0.1f);  // HF init: near-uniform predictions
  float tail = 0.0f;
  for (size_t i = first.size() - 5; i < first.size(); ++i) tail += first[i] / 5;
  EXPECT_LT(tail, 1.4f) << "the model did not learn the text";
  EXPECT_EQ(std::vector<float>(first.begin(), first.begin() + 150), second)
      << "training is not reproducible";
}

}  // namespace
}  // namespace headroom
