// QLoRA's frozen base inside the models: 4-bit models saved by transformers + bitsandbytes
// (tests/fixtures/models/*_4bit, tools/gen_qlora_model_fixture.py) load and give transformers'
// logits; load_in_4bit quantizes a full-precision model to bitsandbytes' exact files; a saved
// 4-bit model has transformers' tensors; and loading materializes one tensor at a time in the
// training dtype (the allocator's peak shows no full-precision copy of the model).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/grad_mode.h"
#include "io/hf_config.h"
#include "io/io_test_helpers.h"
#include "io/pretrained.h"
#include "io/safetensors.h"
#include "memory/device_memory.h"
#include "nn/linear_4bit.h"

namespace headroom {
namespace {

const std::string kModels = std::string(HEADROOM_FIXTURES_DIR) + "/models/";

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return {p, p + c.nbytes()};
}

int count_4bit(CausalLM& model) {
  int n = 0;
  for (auto& [name, module] : model.named_modules()) {
    const auto* layer = dynamic_cast<const Linear*>(module);
    if (layer && is_linear_4bit(*layer)) ++n;
  }
  return n;
}

void expect_logits(CausalLM& model, const std::string& dir, double atol) {
  NoGradGuard no_grad;
  const SafetensorsFile reference(dir + "/reference.safetensors");
  const std::vector<float> logits = model.forward(reference.load("input_ids")).to_float_vector();
  const std::vector<float> expected = reference.load("logits").to_float_vector();
  ASSERT_EQ(logits.size(), expected.size());
  for (size_t i = 0; i < logits.size(); ++i) ASSERT_NEAR(logits[i], expected[i], atol) << i;
}

class Saved4bit : public ::testing::TestWithParam<std::string> {};

TEST_P(Saved4bit, LoadsAndGivesTransformersLogits) {
  const std::string dir = kModels + GetParam() + "_4bit";
  std::unique_ptr<CausalLM> model = load_pretrained(dir);
  EXPECT_EQ(count_4bit(*model), GetParam() == "llama_tiny" ? 14 : 8);  // not lm_head
  for (const auto& [name, p] : model->named_parameters()) {
    EXPECT_EQ(name.find("proj.weight"), std::string::npos) << name << " is still a parameter";
  }
  expect_logits(*model, dir, 2e-5);
}

TEST_P(Saved4bit, LoadIn4bitQuantizesToBitsandbytesFiles) {
  LoadOptions options;
  Quant4bitConfig config;
  config.quant_type = Quant4bitType::nf4;
  config.double_quant = true;
  options.load_in_4bit = config;
  std::unique_ptr<CausalLM> model = load_pretrained(kModels + GetParam(), kCPU, 0, options);
  const std::string dir = kModels + GetParam() + "_4bit";
  const SafetensorsFile saved(dir + "/model.safetensors");
  const auto buffers = model->named_buffers();
  ASSERT_FALSE(buffers.empty());
  for (const auto& [name, t] : buffers) {
    ASSERT_TRUE(saved.contains(name)) << name;
    EXPECT_EQ(bytes_of(t), bytes_of(saved.load(name))) << name;
  }
  expect_logits(*model, dir, 2e-5);

  // Saved as transformers saves it: the same tensor names, the same bytes, a quantization_config.
  io_test::TempDir out;
  save_pretrained(*model, out.str());
  const SafetensorsFile ours(out.str() + "/model.safetensors");
  std::set<std::string> ours_names(ours.names().begin(), ours.names().end());
  std::set<std::string> their_names(saved.names().begin(), saved.names().end());
  EXPECT_EQ(ours_names, their_names);
  for (const std::string& name : saved.names()) {
    EXPECT_EQ(bytes_of(ours.load(name)), bytes_of(saved.load(name))) << name;
  }
  const std::optional<Quant4bitConfig> read = read_quantization_config(out.str() + "/config.json");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, config);
  std::unique_ptr<CausalLM> again = load_pretrained(out.str());
  EXPECT_EQ(count_4bit(*again), count_4bit(*model));
  expect_logits(*again, dir, 2e-5);
}

TEST_P(Saved4bit, ConvertingALoadedModelGivesTheSameLayers) {
  std::unique_ptr<CausalLM> model = load_pretrained(kModels + GetParam());
  Quant4bitConfig config;
  config.quant_type = Quant4bitType::nf4;
  config.double_quant = true;
  const std::vector<std::string> converted = convert_linears_to_4bit(*model, config);
  EXPECT_EQ(static_cast<int>(converted.size()), count_4bit(*model));
  for (const std::string& name : converted) EXPECT_FALSE(is_skipped_module(name, {"lm_head"}));
  const SafetensorsFile saved(kModels + GetParam() + "_4bit/model.safetensors");
  for (const auto& [name, t] : model->named_buffers()) {
    EXPECT_EQ(bytes_of(t), bytes_of(saved.load(name))) << name;
  }
  expect_logits(*model, kModels + GetParam() + "_4bit", 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Models, Saved4bit, ::testing::Values("llama_tiny", "gpt2_tiny"));

TEST(QloraModels, TrainingDtypeAndInitAreRoundedPerTensor) {
  io_test::TempDir dir;
  const HfConfig config = read_hf_config(kModels + "llama_tiny/config.json");
  write_hf_config(dir.file("config.json"), config);
  LoadOptions options;
  options.dtype = DType::bf16;
  std::unique_ptr<CausalLM> bf16 = load_pretrained(dir.str(), kCPU, 3, options);
  std::unique_ptr<CausalLM> f32 = make_causal_lm(config, kCPU, 3);
  const auto expected = f32->named_parameters();
  const auto got = bf16->named_parameters();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, expected[i].first);
    EXPECT_EQ(got[i].second.dtype(), DType::bf16) << got[i].first;
    EXPECT_TRUE(got[i].second.requires_grad());
    EXPECT_EQ(bytes_of(got[i].second), bytes_of(expected[i].second.detach().to(DType::bf16)))
        << got[i].first;
  }
}

TEST(QloraModels, LoadingNeverHoldsTheModelInFullPrecision) {
  LlamaConfig c;
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.intermediate_size = 768;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.max_position_embeddings = 64;
  io_test::TempDir dir;
  write_hf_config(dir.file("config.json"), c);
  int64_t params = 0;
  {
    std::unique_ptr<CausalLM> probe = make_causal_lm(c, kMeta);
    params = probe->num_parameters();
  }
  const int64_t f32_model = params * 4;
  LoadOptions options;
  options.dtype = DType::bf16;
  Quant4bitConfig q;
  q.quant_type = Quant4bitType::nf4;
  q.double_quant = true;
  q.compute_dtype = DType::bf16;
  options.load_in_4bit = q;
  // Requested bytes (what the tensors asked for), so blocks cached by earlier tests, which may
  // serve a request unsplit, do not change the figures.
  const int64_t before = memory_stats(kCPU).at("requested_bytes.all.current");
  reset_peak_memory_stats(kCPU);
  std::unique_ptr<CausalLM> model = load_pretrained(dir.str(), kCPU, 0, options);
  const std::map<std::string, int64_t> stats = memory_stats(kCPU);
  const int64_t peak = stats.at("requested_bytes.all.peak") - before;
  const int64_t kept = stats.at("requested_bytes.all.current") - before;
  // What stays: embeddings and lm_head in bf16 (2 * 512 * 256 * 2 bytes), the norms, and the
  // linears in 4 bits. The peak adds one layer's weight while it is read and quantized
  // (768 * 256 in f32 and bf16), far below the model in fp32 or even in bf16.
  EXPECT_LT(kept, f32_model / 4);
  EXPECT_LT(peak, params * 2);  // below even the model in bf16
  EXPECT_LE(peak - kept, 768 * 256 * (4 + 2) + 4096);
  EXPECT_EQ(count_4bit(*model), 4 * 7);
}

TEST(QloraModels, BadQuantizationConfigNamesTheField) {
  io_test::TempDir dir;
  io_test::write_bytes(dir.file("config.json"),
                       R"({"model_type": "llama", "quantization_config": {"load_in_4bit": true,
                           "bnb_4bit_quant_type": "int4", "quant_method": "bitsandbytes"}})");
  try {
    read_quantization_config(dir.file("config.json"));
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("quantization_config.bnb_4bit_quant_type: 'int4'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace headroom
