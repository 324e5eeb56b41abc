// evaluate_file against a hand computation, the model presets and generate(). The trainer's data
// source has its own file, test_data_loader_batch_source.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/pretrained.h"
#include "nn/model_presets.h"
#include "train/generate.h"
#include "train/model_source.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;

// Cross-entropy of every next byte, from the model's logits and a log-softmax in double.
// The fixture's model directory with weights (HF's initialisation from seed 0) saved in it: eval
// refuses a directory without weights.
std::string model_with_weights(const fs::path& root) {
  test_data::tiny_training_args(root, 0.0);
  const std::string model_dir = (root / "model").string();
  save_pretrained(*load_pretrained(model_dir, kCPU, 0), model_dir);
  return model_dir;
}

TEST(EvaluateFile, EqualsTheMeanCrossEntropyOfConsecutiveWindows) {
  TempDir tmp("evaluate_file");
  const std::string model_dir = model_with_weights(tmp.path());
  const std::string text = std::string(test_data::kTinyText).substr(0, 100);
  std::ofstream((tmp.path() / "eval.txt").string()) << text;
  const int64_t t = 8;  // 100 bytes: 11 windows of 9, a tail of 1 dropped

  const EvalResult result =
      evaluate_file(base_request(model_dir), (tmp.path() / "eval.txt").string(), t, 4, "cpu");
  EXPECT_EQ(result.tokens, 11 * t);

  auto model = load_pretrained(model_dir, kCPU, 0);
  model->eval();
  double total = 0.0;
  for (int64_t w = 0; w < 11; ++w) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < t; ++i) ids.push_back(static_cast<unsigned char>(text[w * 9 + i]));
    const std::vector<float> logits =
        model->forward(Tensor::from_ints(ids, {1, t})).to_float_vector();
    for (int64_t i = 0; i < t; ++i) {
      const float* row = logits.data() + i * 256;
      double max = row[0], sum = 0.0;
      for (int v = 0; v < 256; ++v) max = std::max<double>(max, row[v]);
      for (int v = 0; v < 256; ++v) sum += std::exp(row[v] - max);
      const int target = static_cast<unsigned char>(text[w * 9 + i + 1]);
      total += -(row[target] - max - std::log(sum));
    }
  }
  const double expected = total / static_cast<double>(11 * t);
  EXPECT_NEAR(result.loss, expected, 1e-5 * expected);
  EXPECT_NEAR(result.perplexity, std::exp(expected), 1e-4 * std::exp(expected));
}

TEST(EvaluateFile, TooLittleDataNamesTheFile) {
  TempDir tmp("evaluate_short");
  const std::string model_dir = model_with_weights(tmp.path());
  std::ofstream((tmp.path() / "short.txt").string()) << "abc";
  try {
    evaluate_file(base_request(model_dir), (tmp.path() / "short.txt").string(), 8, 1, "cpu");
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("short.txt"), std::string::npos) << e.what();
  }
}

TEST(ModelPresets, MatchHfConfigs) {
  EXPECT_EQ(std::get<GPT2Config>(model_preset("gpt2")), GPT2Config{});
  const auto xl = std::get<GPT2Config>(model_preset("gpt2-xl"));
  EXPECT_EQ(xl.n_embd, 1600);
  EXPECT_EQ(xl.n_layer, 48);
  const auto llama70 = std::get<LlamaConfig>(model_preset("llama-70b"));
  EXPECT_EQ(llama70.effective_num_key_value_heads(), 8);
  EXPECT_EQ(llama70.intermediate_size, 28672);
  EXPECT_EQ(context_length(model_preset("gpt2-tiny")), 256);
  EXPECT_EQ(vocab_size(model_preset("llama-tiny")), 256);
  EXPECT_THROW(model_preset("gpt3"), ValueError);
}

TEST(ModelSource, PresetGetsTheByteTokenizerAndErrorsNameThePath) {
  ModelAndTokenizer tiny = load_model_and_tokenizer("llama-tiny", kCPU, 1);
  EXPECT_EQ(tiny.tokenizer->kind(), "byte");
  TempDir tmp("model_source");
  try {
    load_model_and_tokenizer(tmp.path().string(), kCPU, 0);
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.path().string()), std::string::npos) << e.what();
  }
}

TEST(Generate, GreedyIsDeterministicAndSamplingFollowsTheSeed) {
  auto model = make_causal_lm(model_preset("gpt2-tiny"), kCPU, 5);
  const std::vector<int32_t> prompt = {'H', 'i'};
  const auto greedy = generate(*model, prompt, {.max_new_tokens = 5, .temperature = 0.0});
  ASSERT_EQ(greedy.size(), 7u);
  EXPECT_EQ(greedy, generate(*model, prompt, {.max_new_tokens = 5, .temperature = 0.0}));
  const auto a = generate(*model, prompt, {.max_new_tokens = 5, .seed = 1});
  EXPECT_EQ(a, generate(*model, prompt, {.max_new_tokens = 5, .seed = 1}));
  EXPECT_TRUE(model->is_training());
  EXPECT_THROW(generate(*model, {}, {}), ValueError);
}

}  // namespace
}  // namespace headroom
