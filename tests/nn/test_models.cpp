// GPT-2 and Llama against the reference recorded from PyTorch (tools/gen_model_reference.py):
// logits, loss and every parameter gradient; HF names, initialisation, and weight files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/engine.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "io/hf_config.h"
#include "io/pretrained.h"
#include "io/safetensors.h"
#include "memory/device_memory.h"
#include "nn/gpt2.h"
#include "nn/expect_close.h"
#include "nn/llama.h"
#include "nn/model_presets.h"
#include "ops/ops.h"

namespace headroom {
namespace {

const std::string kModels = std::string(HEADROOM_FIXTURES_DIR) + "/models/";

using test_data::expect_close;

// |a - b| <= rtol * |b| + atol for each element on its own, with atol = atol_of_scale * max|b|:
// a floor for elements near zero, whose error is that of the O(max|b|) terms they are summed
// from. Returns the largest (|a - b| - rtol * |b|) / max|b|, the atol_of_scale the tensor needs.
double expect_close_elementwise(const Tensor& actual, const Tensor& expected, double rtol,
                                double atol_of_scale, const std::string& what) {
  EXPECT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.to(DType::f32).to_float_vector();
  const std::vector<float> b = expected.to_float_vector();
  double scale = 0.0;
  for (float v : b) scale = std::max(scale, static_cast<double>(std::abs(v)));
  const double atol = atol_of_scale * scale;
  double needed = 0.0;
  int failures = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    const double excess = d - rtol * std::abs(static_cast<double>(b[i]));
    needed = std::max(needed, excess);
    if (excess > atol && ++failures <= 3) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << b[i]
                    << " (|a - b| " << d << " > " << rtol << " * |b| + " << atol << ")";
    }
  }
  EXPECT_EQ(failures, 0) << what << ": elements outside rtol " << rtol << ", atol " << atol;
  return scale > 0.0 ? needed / scale : 0.0;
}

std::string load_error(const std::string& dir) {
  try {
    load_pretrained(dir);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

// The element-wise check's floor for elements near zero: 3e-6 of the tensor's largest magnitude.
// Elements of at least 10% of that magnitude meet the relative bounds alone with 3x (logits) and
// 20x (gradients) to spare; smaller ones carry the absolute rounding error of their larger
// summands, which no relative bound holds: a bias's gradient sums the batch's 48 tokens in fp32,
// up to 48 x 6e-8 = 2.9e-6 of the scale, and how much of that shows depends on the summation
// order the compiler picks (1.8e-6 for qwen2_yarn_tiny's k_proj bias in the ASan build's -O2,
// under 1e-6 in the -O3 build).
constexpr double kAtolOfScale = 3e-6;

class ModelReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelReference, LogitsLossAndGradientsMatchPyTorch) {
  const std::string dir = kModels + GetParam();
  std::unique_ptr<CausalLM> model = load_pretrained(dir);
  model->eval();  // the reference has no dropout
  const SafetensorsFile reference(dir + "/reference.safetensors");
  const Tensor ids = reference.load("input_ids");
  const Tensor targets = reference.load("targets");

  {
    NoGradGuard no_grad;
    const Tensor logits = model->forward(ids), expected = reference.load("logits");
    expect_close(logits, expected, 1e-5, "logits");
    const double needed = expect_close_elementwise(logits, expected, 1e-5, kAtolOfScale, "logits");
    std::printf("logits: element-wise within rtol 1e-5 + %.2g of the scale\n", needed);
  }
  const Tensor loss = model->loss(ids, targets);
  EXPECT_NEAR(loss.item(), reference.load("loss").item(), 1e-5 * reference.load("loss").item());
  backward(loss);
  int checked = 0;
  double worst_needed = 0.0;
  std::string worst;
  for (const auto& [name, param] : model->named_parameters()) {
    ASSERT_TRUE(param.grad().defined()) << name;
    const Tensor expected = reference.load("grad." + name);
    expect_close(param.grad(), expected, 1e-4, "grad." + name);
    const double needed =
        expect_close_elementwise(param.grad(), expected, 1e-4, kAtolOfScale, "grad." + name);
    if (needed >= worst_needed) worst_needed = needed, worst = name;
    ++checked;
  }
  std::printf("gradients: element-wise within rtol 1e-4 + %.2g of the scale (grad.%s)\n",
              worst_needed, worst.c_str());
  EXPECT_EQ(checked, static_cast<int>(SafetensorsFile(dir + "/model.safetensors").size()));
}

TEST_P(ModelReference, UnfusedHeadAndLossGiveTheSameLoss) {
  const std::string dir = kModels + GetParam();
  std::unique_ptr<CausalLM> model = load_pretrained(dir);
  model->eval();
  const SafetensorsFile reference(dir + "/reference.safetensors");
  const Tensor ids = reference.load("input_ids"), targets = reference.load("targets");
  NoGradGuard no_grad;
  EXPECT_NEAR(cross_entropy(model->forward(ids), targets).item(), model->loss(ids, targets).item(),
              1e-5);
}

TEST_P(ModelReference, SaveAndReloadGiveTheSameModel) {
  const std::string dir = kModels + GetParam();
  std::unique_ptr<CausalLM> model = load_pretrained(dir);
  const std::string out = ::testing::TempDir() + "headroom_saved_" + GetParam();
  std::filesystem::remove_all(out);
  save_pretrained(*model, out);
  const SafetensorsFile saved(out + "/model.safetensors");
  EXPECT_EQ(saved.size(), SafetensorsFile(dir + "/model.safetensors").size());
  EXPECT_FALSE(saved.contains("lm_head.weight") && GetParam() == "gpt2_tiny");
  std::unique_ptr<CausalLM> again = load_pretrained(out);
  EXPECT_EQ(again->config(), model->config());
  const Tensor ids = SafetensorsFile(dir + "/reference.safetensors").load("input_ids");
  model->eval();
  again->eval();
  NoGradGuard no_grad;
  EXPECT_EQ(again->forward(ids).to_float_vector(), model->forward(ids).to_float_vector());
}

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// save_pretrained with small shards writes the index and the shards HF would, and
// load_pretrained reads them back into a model that gives the same logits, bit for bit.
TEST_P(ModelReference, ShardedSaveAndReloadGiveTheSameLogits) {
  const std::string dir = kModels + GetParam();
  std::unique_ptr<CausalLM> model = load_pretrained(dir);
  const std::string out = ::testing::TempDir() + "headroom_sharded_" + GetParam();
  std::filesystem::remove_all(out);
  const size_t max_shard_bytes = 30'000;  // the models hold about 100 KB
  save_pretrained(*model, out, max_shard_bytes);

  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors"));
  const nlohmann::json index = nlohmann::json::parse(read_text(out + "/" + kSafetensorsIndexName));
  std::set<std::string> shards;
  size_t total = 0;
  for (const auto& [name, param] : model->named_parameters()) {
    ASSERT_TRUE(index["weight_map"].contains(name)) << name;
    shards.insert(index["weight_map"][name].get<std::string>());
    total += param.nbytes();
  }
  EXPECT_EQ(index["weight_map"].size(), model->named_parameters().size());
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), total);
  ASSERT_GE(shards.size(), 3u);
  size_t number = 0;
  for (const std::string& shard : shards) {  // model-00001-of-0000N.safetensors, ...
    char expected[64];
    std::snprintf(expected, sizeof expected, "model-%05zu-of-%05zu.safetensors", ++number,
                  shards.size());
    EXPECT_EQ(shard, expected);
    const SafetensorsFile file(out + "/" + shard);
    size_t bytes = 0;
    for (const std::string& name : file.names()) bytes += file.info(name).nbytes;
    // A shard outgrows the limit only by holding a single larger tensor.
    EXPECT_TRUE(bytes <= max_shard_bytes || file.size() == 1) << shard << ": " << bytes << " B";
  }

  std::unique_ptr<CausalLM> again = load_pretrained(out);
  const Tensor ids = SafetensorsFile(dir + "/reference.safetensors").load("input_ids");
  model->eval();
  again->eval();
  NoGradGuard no_grad;
  EXPECT_EQ(again->forward(ids).to_float_vector(), model->forward(ids).to_float_vector());
}

// A shard set that lacks a tensor is refused with the file and the tensor named: whether the
// index still lists it (the shard it names does not hold it) or not (the model needs it).
TEST_P(ModelReference, ShardSetMissingATensorIsRefusedWithItsNames) {
  const std::string dir = kModels + GetParam();
  std::unique_ptr<CausalLM> model = load_pretrained(dir);
  const std::string out = ::testing::TempDir() + "headroom_sharded_missing_" + GetParam();
  std::filesystem::remove_all(out);
  save_pretrained(*model, out, 30'000);
  const std::string index_path = out + "/" + kSafetensorsIndexName;
  nlohmann::json index = nlohmann::json::parse(read_text(index_path));
  const std::string victim = model->named_parameters()[3].first;
  const std::string shard = index["weight_map"][victim].get<std::string>();

  std::vector<std::pair<std::string, Tensor>> kept;
  {
    const SafetensorsFile file(out + "/" + shard);
    for (const std::string& name : file.names()) {
      if (name != victim) kept.emplace_back(name, file.load(name).clone());
    }
  }
  save_safetensors(out + "/" + shard, kept, {{"format", "pt"}});
  std::string message = load_error(out);
  EXPECT_NE(message.find(kSafetensorsIndexName), std::string::npos) << message;
  EXPECT_NE(message.find(shard), std::string::npos) << message;
  EXPECT_NE(message.find("'" + victim + "'"), std::string::npos) << message;

  index["weight_map"].erase(victim);
  write_file_atomically(index_path, index.dump(2) + "\n");
  message = load_error(out);
  EXPECT_NE(message.find(index_path), std::string::npos) << message;
  EXPECT_NE(message.find("'" + victim + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("missing"), std::string::npos) << message;
}

// llama31_tiny (RoPE scaled as Llama 3.1's), qwen2_tiny (q / k / v biases), qwen3_tiny
// (q_norm / k_norm), qwen2_window_tiny (a sliding window on layer 1 only), mistral_tiny (a
// sliding window of 7 keys), phi3_tiny (fused projections, a window of 11 keys), qwen2_yarn_tiny
// (yarn RoPE), phi3_longrope_tiny (longrope's long factors over 48 tokens), gemma2_tiny (Gemma
// 2's block with both soft caps biting, a sliding layer, the tied head) and gemma3_tiny (q_norm /
// k_norm, two RoPE bases, sliding and global layers): transformers' own models and files
// (tools/gen_transformers_references.py).
INSTANTIATE_TEST_SUITE_P(Models, ModelReference,
                         ::testing::Values("gpt2_tiny", "llama_tiny", "llama31_tiny", "qwen2_tiny",
                                           "qwen3_tiny", "qwen2_window_tiny", "mistral_tiny",
                                           "phi3_tiny", "qwen2_yarn_tiny", "phi3_longrope_tiny",
                                           "gemma2_tiny", "gemma3_tiny"));

// longrope takes its short factors in a forward that stays within the pretraining context (32
// positions here): the first 32 tokens' logits as transformers gives them for that forward.
TEST(Models, LongropeShortForwardMatchesTransformers) {
  const std::string dir = kModels + "phi3_longrope_tiny";
  std::unique_ptr<CausalLM> model = load_pretrained(dir);
  model->eval();
  const SafetensorsFile reference(dir + "/reference.safetensors");
  NoGradGuard no_grad;
  const Tensor logits = model->forward(reference.load("short.input_ids"));
  expect_close(logits, reference.load("short.logits"), 1e-5, "short.logits");
}

// yarn's and longrope's frequencies and attention factor as transformers computes them from each
// config.json (tools/gen_rope_scaling_golden.py): the config parsed by headroom, the frequencies
// from the devices' shared function. Within one fp32 ulp: std::pow may round the standard power
// one ulp apart from torch's, which carries into 3 of these 304 frequencies; the rest are equal.
TEST(Models, YarnAndLongropeFrequenciesAreTransformers) {
  const std::string path = kModels + "rope_scaling_reference.json";
  const nlohmann::json reference = nlohmann::json::parse(read_text(path));
  ASSERT_GE(reference["cases"].size(), 8u);
  for (const auto& [name, c] : reference["cases"].items()) {
    const LlamaConfig config =
        std::get<LlamaConfig>(parse_hf_config(c["config"].dump(), name + "/config.json"));
    const RopeParameters rope = config.rope();
    EXPECT_DOUBLE_EQ(rope.scaling.attention_factor, c["attention_factor"].get<double>()) << name;
    const int64_t dim = config.effective_head_dim();
    const int64_t l0 = rope.scaling.original_max_position_embeddings;
    for (const char* key : {"inv_freq", "long_inv_freq"}) {
      if (!c.contains(key)) continue;
      const std::vector<float> expected = c[key].get<std::vector<float>>();
      ASSERT_EQ(static_cast<int64_t>(expected.size()), dim / 2) << name;
      // A forward over 0..L0-1 and one over 0..L0, as the reference's.
      const bool long_factors =
          rope_uses_long_factors(rope.scaling, std::string_view(key) == "inv_freq" ? l0 : l0 + 1);
      EXPECT_EQ(long_factors, std::string_view(key) == "long_inv_freq") << name;
      const auto base = static_cast<float>(rope.theta);
      for (int64_t i = 0; i < dim / 2; ++i) {
        const float pos = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
        const float ours = rope_inv_freq(rope, pos, i, dim, long_factors);
        const float theirs = expected[static_cast<size_t>(i)];
        const float ulp = std::nextafter(theirs, 2 * theirs) - theirs;
        EXPECT_LE(std::fabs(ours - theirs), ulp)
            << name << " " << key << "[" << i << "]: " << ours << " vs " << theirs;
      }
    }
  }
}

// Llama 3.1's RoPE frequencies as transformers computes them at load (_compute_llama3_parameters),
// for the tiny fixture and for Llama-3.1-8B's real parameters: within one fp32 ulp (the standard
// frequency's pow may round differently), the same band for every frequency.
TEST(Models, Llama3RopeFrequenciesAreTransformers) {
  const SafetensorsFile reference(kModels + "llama31_tiny/reference.safetensors");
  const LlamaConfig tiny = std::get<LlamaConfig>(read_hf_config(kModels + "llama31_tiny"));
  LlamaConfig big = tiny;
  big.rope_scaling.original_max_position_embeddings = 8192;
  struct Case {
    const char* name;
    RopeParameters rope;
    int64_t dim;
  };
  for (const Case& c : {Case{"rope.inv_freq", tiny.rope(), tiny.effective_head_dim()},
                        Case{"rope.llama31_8b_inv_freq", big.rope(), 128}}) {
    const Tensor expected = reference.load(c.name);
    ASSERT_EQ(expected.numel(), c.dim / 2) << c.name;
    const auto base = static_cast<float>(c.rope.theta);
    for (int64_t i = 0; i < c.dim / 2; ++i) {
      const float standard =
          1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(c.dim));
      const float ours = scaled_inv_freq(c.rope.scaling, standard);
      const float theirs = expected.data<float>()[i];
      EXPECT_LE(std::fabs(ours - theirs), std::nextafter(theirs, 2 * theirs) - theirs)
          << c.name << "[" << i << "]: " << ours << " vs " << theirs;
    }
  }
}

TEST(Models, HfParameterNamesAndCounts) {
  GPT2Config gpt2;
  gpt2.vocab_size = 96, gpt2.n_positions = 32, gpt2.n_embd = 32, gpt2.n_layer = 2, gpt2.n_head = 4;
  GPT2LMHeadModel g(gpt2);
  const auto names = g.named_parameters();
  EXPECT_EQ(names.front().first, "transformer.wte.weight");
  EXPECT_EQ(names[2].first, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(g.parameter("transformer.h.0.attn.c_attn.weight").shape(), (Shape{32, 96}));
  EXPECT_EQ(names.back().first, "transformer.ln_f.bias");
  // 2 embeddings + 2 blocks of 12 tensors + ln_f: the tied head adds nothing.
  EXPECT_EQ(names.size(), 28u);
  EXPECT_EQ(g.num_parameters(), 96 * 32 + 32 * 32 +
                                    2 * (2 * 32 + 32 * 96 + 96 + 32 * 32 + 32 + 2 * 32 + 32 * 128 +
                                         128 + 128 * 32 + 32) +
                                    2 * 32);

  LlamaConfig llama;
  llama.vocab_size = 96, llama.hidden_size = 32, llama.intermediate_size = 64;
  llama.num_hidden_layers = 2, llama.num_attention_heads = 4, llama.num_key_value_heads = 2;
  LlamaForCausalLM l(llama);
  EXPECT_EQ(l.parameter("model.layers.1.self_attn.k_proj.weight").shape(), (Shape{16, 32}));
  EXPECT_EQ(l.named_parameters().back().first, "lm_head.weight");
}

TEST(Models, HfInitialisation) {
  GPT2Config c;
  c.vocab_size = 512, c.n_positions = 64, c.n_embd = 128, c.n_layer = 8, c.n_head = 4;
  GPT2LMHeadModel model(c, kCPU, 3);
  auto stddev = [](const Tensor& t) {
    const std::vector<float> v = t.to_float_vector();
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += static_cast<double>(x) * x;
    const double mean = s / static_cast<double>(v.size());
    return std::sqrt(s2 / static_cast<double>(v.size()) - mean * mean);
  };
  EXPECT_NEAR(stddev(model.parameter("transformer.h.0.attn.c_attn.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(model.parameter("transformer.wte.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(model.parameter("transformer.h.3.mlp.c_proj.weight")), 0.02 / std::sqrt(16.0),
              0.0003);
  EXPECT_EQ(model.parameter("transformer.h.0.ln_1.weight").to_float_vector(),
            std::vector<float>(128, 1.0f));
  EXPECT_EQ(model.parameter("transformer.h.0.attn.c_attn.bias").to_float_vector(),
            std::vector<float>(384, 0.0f));
  // The same seed gives the same model.
  GPT2LMHeadModel same(c, kCPU, 3);
  EXPECT_EQ(same.parameter("transformer.wpe.weight").to_float_vector(),
            model.parameter("transformer.wpe.weight").to_float_vector());
}

// LlamaPreTrainedModel._init_weights: every nn.Linear and nn.Embedding weight N(0,
// initializer_range), Linear biases zero, the embedding's padding_idx (pad_token_id) row zero;
// LlamaRMSNorm's weights start at 1 (torch.ones in its constructor).
TEST(Models, LlamaHfInitialisation) {
  LlamaConfig c;
  c.vocab_size = 512, c.hidden_size = 128, c.intermediate_size = 256, c.num_hidden_layers = 3;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.initializer_range = 0.03;
  c.attention_bias = true, c.mlp_bias = true, c.pad_token_id = 7;
  LlamaForCausalLM model(c, kCPU, 3);
  const double sigma = c.initializer_range;

  // Per weight matrix, its sample mean and standard deviation within 5 standard errors of 0 and
  // sigma (standard errors sigma / sqrt(n) and sigma / sqrt(2n) for n normal draws); pooled over
  // all of them, the share within one sigma is the normal's 68.3% (a uniform law with the same
  // sigma would give 57.7%), within 5 standard errors of a binomial share.
  int64_t weights = 0, biases = 0, norms = 0, pooled = 0, within_one_sigma = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    std::vector<float> v = p.to_float_vector();
    if (name.ends_with("bias")) {
      EXPECT_EQ(v, std::vector<float>(v.size(), 0.0f)) << name;
      ++biases;
      continue;
    }
    if (name.ends_with("norm.weight")) {
      EXPECT_EQ(v, std::vector<float>(v.size(), 1.0f)) << name;
      ++norms;
      continue;
    }
    ASSERT_EQ(p.ndim(), 2) << name;
    ++weights;
    if (name == "model.embed_tokens.weight") {
      const auto row = v.begin() + 7 * c.hidden_size;
      EXPECT_EQ(std::vector<float>(row, row + c.hidden_size),
                std::vector<float>(c.hidden_size, 0.0f));
      v.erase(row, row + c.hidden_size);  // the rest is N(0, sigma)
    }
    const double n = static_cast<double>(v.size());
    double sum = 0, sum_sq = 0;
    for (float x : v) {
      sum += x, sum_sq += static_cast<double>(x) * x;
      within_one_sigma += std::abs(x) <= sigma;
    }
    pooled += static_cast<int64_t>(v.size());
    const double mean = sum / n;
    EXPECT_NEAR(mean, 0.0, 5 * sigma / std::sqrt(n)) << name;
    EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), sigma, 5 * sigma / std::sqrt(2 * n)) << name;
  }
  // embed_tokens, lm_head, and per layer q, k, v, o, gate, up, down; 4 attention and 3 MLP
  // biases per layer; 2 norms per layer and the final one.
  EXPECT_EQ(weights, 2 + 7 * c.num_hidden_layers);
  EXPECT_EQ(biases, 7 * c.num_hidden_layers);
  EXPECT_EQ(norms, 2 * c.num_hidden_layers + 1);
  const double share = static_cast<double>(within_one_sigma) / static_cast<double>(pooled);
  EXPECT_NEAR(share, 0.682689, 5 * std::sqrt(0.682689 * 0.317311 / static_cast<double>(pooled)));

  // The same seed gives the same model, another seed another one.
  LlamaForCausalLM same(c, kCPU, 3), other(c, kCPU, 4);
  for (const auto& [name, p] : model.named_parameters()) {
    EXPECT_EQ(same.parameter(name).to_float_vector(), p.to_float_vector()) << name;
    if (p.ndim() == 2) {
      EXPECT_NE(other.parameter(name).to_float_vector(), p.to_float_vector()) << name;
    }
  }

  // nn.Embedding's padding_idx counts from the end when negative and must lie in the vocabulary.
  c.pad_token_id = -1;
  const Tensor last = LlamaForCausalLM(c, kCPU, 3)
                          .parameter("model.embed_tokens.weight")
                          .narrow(0, c.vocab_size - 1, 1);
  EXPECT_EQ(last.to_float_vector(), std::vector<float>(c.hidden_size, 0.0f));
  c.pad_token_id = c.vocab_size;
  EXPECT_THROW(LlamaForCausalLM(c, kCPU, 3), ValueError);
}

// eval() turns every dropout of GPT-2 off (embd_pdrop, attn_pdrop, resid_pdrop) and train() turns
// it back on: in eval mode the logits do not depend on the dropout RNG and equal those of the same
// weights with every pdrop 0.
TEST(Models, EvalTurnsDropoutOffAndTrainOn) {
  GPT2Config c;
  c.vocab_size = 96, c.n_positions = 32, c.n_embd = 32, c.n_layer = 2, c.n_head = 4;
  c.embd_pdrop = 0.1, c.attn_pdrop = 0.1, c.resid_pdrop = 0.1;
  GPT2LMHeadModel dropping(c, kCPU, 5);
  GPT2Config no_dropout = c;
  no_dropout.embd_pdrop = no_dropout.attn_pdrop = no_dropout.resid_pdrop = 0.0;
  GPT2LMHeadModel plain(no_dropout, kCPU, 6);
  NoGradGuard no_grad;
  for (const auto& [name, p] : dropping.named_parameters()) plain.parameter(name).copy_(p);
  std::vector<int64_t> id_values;
  for (int64_t i = 0; i < 2 * 16; ++i) id_values.push_back((i * 37 + 11) % c.vocab_size);
  const Tensor ids = Tensor::from_ints(id_values, {2, 16});

  ASSERT_TRUE(dropping.is_training());  // modules start in training mode, as torch's do
  dropping.eval();
  manual_seed(1);
  const std::vector<float> first = dropping.forward(ids).to_float_vector();
  manual_seed(2);
  const std::vector<float> second = dropping.forward(ids).to_float_vector();
  EXPECT_EQ(first, second);
  plain.eval();
  EXPECT_EQ(first, plain.forward(ids).to_float_vector());

  dropping.train();
  manual_seed(1);
  const std::vector<float> trained = dropping.forward(ids).to_float_vector();
  EXPECT_NE(trained, first);
  manual_seed(1);  // the same masks again
  EXPECT_EQ(dropping.forward(ids).to_float_vector(), trained);
  dropping.eval();
  EXPECT_EQ(dropping.forward(ids).to_float_vector(), first);
}

void copy_dir(const std::string& from, const std::string& to) {
  std::filesystem::remove_all(to);
  std::filesystem::create_directories(to);
  for (const auto& entry : std::filesystem::directory_iterator(from)) {
    std::filesystem::copy_file(entry.path(), to + "/" + entry.path().filename().string());
  }
}

TEST(Models, BadWeightFilesAreRejectedWithTheirNames) {
  const std::string dir = ::testing::TempDir() + "headroom_bad_gpt2";
  copy_dir(kModels + "gpt2_tiny", dir);
  GPT2LMHeadModel model(std::get<GPT2Config>(read_hf_config(dir + "/config.json")));
  std::vector<std::pair<std::string, Tensor>> tensors = model.named_parameters();

  auto rewrite = [&](std::vector<std::pair<std::string, Tensor>> t) {
    save_safetensors(dir + "/model.safetensors", t);
  };
  auto missing = tensors;
  missing.erase(missing.begin() + 5);
  rewrite(missing);
  std::string message = load_error(dir);
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find(tensors[5].first), std::string::npos) << message;
  EXPECT_NE(message.find("missing"), std::string::npos) << message;

  auto extra = tensors;
  extra.emplace_back("transformer.h.9.mlp.c_fc.weight", Tensor::zeros({2, 2}));
  rewrite(extra);
  message = load_error(dir);
  EXPECT_NE(message.find("transformer.h.9.mlp.c_fc.weight"), std::string::npos) << message;

  auto wrong_shape = tensors;
  wrong_shape[3].second = Tensor::zeros({7});
  rewrite(wrong_shape);
  message = load_error(dir);
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find(tensors[3].first), std::string::npos) << message;

  // The original openai-community/gpt2 layout: no "transformer." prefix, mask buffers stored.
  std::vector<std::pair<std::string, Tensor>> original;
  for (auto& [name, t] : tensors) original.emplace_back(name.substr(12), t);
  original.emplace_back("h.0.attn.bias", Tensor::ones({1, 1, 32, 32}));
  rewrite(original);
  EXPECT_EQ(load_error(dir), "no error");
}

// Mistral-7B-v0.3 (7.25B) and Phi-3-mini (3.82B, fused projections), built on the meta device:
// their published parameter counts.
TEST(Models, MistralAndPhi3PresetsHaveTheirParameterCounts) {
  const std::pair<const char*, int64_t> presets[] = {{"mistral-7b", 7'248'023'552},
                                                     {"phi-3-mini", 3'821'079'552}};
  for (const auto& [preset, count] : presets) {
    const std::unique_ptr<CausalLM> model = make_causal_lm(*find_model_preset(preset), kMeta, 0);
    int64_t n = 0;
    for (const auto& [name, p] : model->named_parameters()) n += p.numel();
    EXPECT_EQ(n, count) << preset;
  }
}

// Gemma 2 2B / 9B / 27B and Gemma 3 1B / 4B / 12B (the text model), built on the meta device:
// the parameter counts of google/gemma-2-{2b,9b,27b}, and of Gemma 3's text model as KerasHub
// publishes them (999,885,952, 3,880,099,328 and 11,765,788,416 with its 262,144-token vocabulary)
// plus the 64 extra embedding rows of HF's 262,208-token text_config for 4B and 12B.
TEST(Models, GemmaPresetsHaveTheirParameterCounts) {
  const std::pair<const char*, int64_t> presets[] = {{"gemma-2-2b", 2'614'341'888},
                                                     {"gemma-2-9b", 9'241'705'984},
                                                     {"gemma-2-27b", 27'227'128'320},
                                                     {"gemma-3-1b", 999'885'952},
                                                     {"gemma-3-4b", 3'880'099'328 + 64 * 2560},
                                                     {"gemma-3-12b", 11'765'788'416 + 64 * 3840}};
  for (const auto& [preset, count] : presets) {
    const std::unique_ptr<CausalLM> model = make_causal_lm(*find_model_preset(preset), kMeta, 0);
    int64_t n = 0;
    for (const auto& [name, p] : model->named_parameters()) n += p.numel();
    EXPECT_EQ(n, count) << preset;
  }
}

// Note [Drawing in the target dtype]: a model made in bf16 or f16 by HF's init (each parameter
// drawn straight into that dtype, no fp32 copy) equals the fp32 model cast afterwards, bit for
// bit, and allocates nothing but its weights while it is made.
TEST(Models, InitInTheTargetDtypeEqualsTheFp32InitCast) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const HfConfig config = *find_model_preset(preset);
    const std::unique_ptr<CausalLM> reference = make_causal_lm(config, kCPU, 1234);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(preset) + " " + dtype_name(dtype));
      empty_cache(kCPU);
      reset_peak_memory_stats(kCPU);
      const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
      LoadOptions options;
      options.dtype = dtype;
      const std::unique_ptr<CausalLM> model = make_causal_lm_as(config, kCPU, 1234, options);
      const int64_t made = static_cast<int64_t>(memory_allocated(kCPU)) - before;
      const int64_t peak = static_cast<int64_t>(max_memory_allocated(kCPU)) - before;
      int64_t largest = 0;
      const auto expected = reference->named_parameters();
      const auto actual = model->named_parameters();
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t i = 0; i < actual.size(); ++i) {
        ASSERT_EQ(actual[i].first, expected[i].first);
        const Tensor& a = actual[i].second;
        const Tensor cast = expected[i].second.to(dtype);
        ASSERT_EQ(a.dtype(), dtype) << actual[i].first;
        ASSERT_EQ(a.nbytes(), cast.nbytes()) << actual[i].first;
        EXPECT_EQ(std::memcmp(a.data_ptr(), cast.data_ptr(), a.nbytes()), 0) << actual[i].first;
        largest = std::max<int64_t>(largest, static_cast<int64_t>(a.nbytes()));
      }
      // The peak while the model was made is its weights: no fp32 tensor ever beside them (one
      // would add twice its parameter's bytes).
      EXPECT_EQ(peak, made);
      EXPECT_GT(largest, 0);
    }
  }
}

TEST(ModelPresets, SequencesPastTheContextOnlyForRotaryPositions) {
  // GPT-2's positions are a learned table of n_positions rows; a rotary model computes any
  // position (transformers runs Llama 3.1 past max_position_embeddings), so long-context plans
  // beyond it are shapes the model can run.
  const HfConfig gpt2 = *find_model_preset("gpt2");
  EXPECT_NO_THROW(check_max_seq_length(gpt2, 1024));
  EXPECT_THROW(check_max_seq_length(gpt2, 1025), ValueError);
  EXPECT_THROW(check_max_seq_length(gpt2, 0), ValueError);
  const HfConfig llama = *find_model_preset("llama-3.1-8b");
  EXPECT_EQ(context_length(llama), 131072);
  EXPECT_FALSE(position_limit(llama).has_value());
  EXPECT_NO_THROW(check_max_seq_length(llama, 700000));
  EXPECT_THROW(check_max_seq_length(llama, 0), ValueError);
}

}  // namespace
}  // namespace headroom
