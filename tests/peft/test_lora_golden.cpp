// LoRA against the real peft + transformers (tools/gen_lora_golden.py, fixtures in
// tests/fixtures/peft): adapters PEFT saved load into headroom's GPT-2 (Conv1D, fan_in_fan_out,
// bias "all") and Llama (all-linear, rsLoRA, modules_to_save lm_head), and LoRA on either's
// lm_head (GPT-2's tied to wte), and give PEFT's logits,
// loss and adapter gradients; `headroom eval --adapter` gives PEFT's loss; adapter_config.json
// is written as PEFT writes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "apps/cli_run.h"
#include "autograd/engine.h"
#include "core/atomic_file.h"
#include "core/grad_mode.h"
#include "core/json_file.h"
#include "io/pretrained.h"
#include "io/safetensors.h"
#include "nn/expect_close.h"
#include "peft/lora_model.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

const std::string kFixtures = std::string(HEADROOM_FIXTURES_DIR) + "/";

using test_data::expect_close;

struct GoldenCase {
  const char* base;
  const char* adapter;
  size_t tensors;
};

class LoraGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(LoraGolden, PeftAdapterGivesPeftsLogitsLossAndGradients) {
  const GoldenCase c = GetParam();
  const std::string adapter = kFixtures + "peft/" + c.adapter;
  std::unique_ptr<CausalLM> model = load_pretrained(kFixtures + "models/" + c.base);
  load_lora_adapter(*model, adapter);
  model->eval();
  const SafetensorsFile reference(adapter + "/reference.safetensors");
  const Tensor ids = reference.load("input_ids"), targets = reference.load("targets");
  {
    NoGradGuard no_grad;
    expect_close(model->forward(ids), reference.load("logits"), 1e-5, "logits");
  }
  const Tensor loss = model->loss(ids, targets);
  // fp32 on both sides, summed in other orders (oneDNN vs PyTorch): 1e-5 relative.
  EXPECT_NEAR(loss.item(), reference.load("loss").item(), 1e-5 * reference.load("loss").item());
  backward(loss);
  const auto tensors = lora_file_tensors(*model);
  EXPECT_EQ(tensors.size(), c.tensors);
  for (const auto& [key, param] : tensors) {
    ASSERT_TRUE(param.grad().defined()) << key;
    expect_close(param.grad(), reference.load("grad." + key), 1e-4, "grad." + key);
  }
  for (const auto& [name, param] : model->named_parameters()) {
    if (!param.requires_grad()) {
      EXPECT_FALSE(param.grad().defined()) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Peft, LoraGolden,
                         ::testing::Values(GoldenCase{"gpt2_tiny", "gpt2_tiny_lora", 25},
                                           GoldenCase{"llama_tiny", "llama_tiny_lora", 29},
                                           // LoRA on lm_head: GPT-2's tied to wte, Llama's its own;
                                           // PEFT's files hold lm_head.base_layer.weight too.
                                           GoldenCase{"gpt2_tiny", "gpt2_tiny_lora_head", 6},
                                           GoldenCase{"llama_tiny", "llama_tiny_lora_head", 6}),
                         [](const auto& info) { return std::string(info.param.adapter); });

TEST(LoraGolden, EvalWithAPeftAdapterGivesPeftsLoss) {
  const std::string dir = kFixtures + "peft/";
  const EvalResult r =
      evaluate_file(base_request(dir + "llama_bytes"), dir + "llama_bytes/eval.txt", 16, 4, "cpu",
                    dir + "llama_bytes_lora");
  const SafetensorsFile reference(dir + "llama_bytes_lora/reference.safetensors");
  EXPECT_EQ(r.tokens, static_cast<int64_t>(reference.load("eval_tokens").item()));
  // fp32 on both sides, summed in other orders: 1e-5 absolute on a loss near 5.
  EXPECT_NEAR(r.loss, reference.load("eval_loss").item(), 1e-5);
}

// The commands: eval with an adapter, merge (fp32 and bf16) evaluated without one, and an adapter
// for another architecture refused on one line with exit 2.
TEST(LoraGolden, EvalAndMergeCommandsGivePeftsLoss) {
  const std::string dir = kFixtures + "peft/";
  const double peft_loss =
      SafetensorsFile(dir + "llama_bytes_lora/reference.safetensors").load("eval_loss").item();
  const std::string data = " --data " + dir + "llama_bytes/eval.txt --max_seq_length 16 --json";
  const CliRun eval = run_cli("eval --model " + dir + "llama_bytes --adapter " + dir +
                              "llama_bytes_lora" + data + " --device cpu");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  // The CLI prints the loss rounded and sums in another order than PEFT: 1e-5 absolute.
  EXPECT_NEAR(nlohmann::json::parse(eval.out)["loss"].get<double>(), peft_loss, 1e-5);

  const test_data::TempDir tmp("lora_merge");
  for (const std::string dtype : {"fp32", "bf16"}) {
    const std::string out = (tmp.path() / dtype).string();
    const CliRun merge = run_cli("merge --model " + dir + "llama_bytes --adapter " + dir +
                                 "llama_bytes_lora --output_dir " + out + " --dtype " + dtype);
    ASSERT_EQ(merge.exit_code, 0) << merge.err;
    EXPECT_NE(merge.out.find("merged 4 LoRA layers"), std::string::npos) << merge.out;
    const SafetensorsFile weights(out + "/model.safetensors");
    EXPECT_FALSE(weights.contains("model.layers.0.self_attn.q_proj.lora_A.weight"));
    EXPECT_EQ(weights.info("model.layers.0.self_attn.q_proj.weight").dtype,
              dtype == "bf16" ? DType::bf16 : DType::f32);
    const CliRun merged = run_cli("eval --model " + out + data + " --device cpu");
    ASSERT_EQ(merged.exit_code, 0) << merged.err;
    // bf16 weights round each element: the loss moves by about bf16's 2^-8 relative step.
    EXPECT_NEAR(nlohmann::json::parse(merged.out)["loss"].get<double>(), peft_loss,
                dtype == "bf16" ? 2e-2 : 1e-5);
  }

  const CliRun wrong =
      run_cli("eval --model " + dir + "llama_bytes --adapter " + dir + "gpt2_tiny_lora" + data);
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("gpt2_tiny_lora/adapter_config.json: target_modules: 'c_attn' matches "
                           "no linear layer of the llama model"),
            std::string::npos)
      << wrong.err;
  EXPECT_EQ(std::count(wrong.err.begin(), wrong.err.end(), '\n'), 1) << wrong.err;
}

// A merge never writes where it reads from (Note [Merge output]): into the base itself, spelled
// otherwise or through a link, inside it, or around it. The base is untouched afterwards, and a
// merge over an earlier output replaces it whole.
TEST(LoraGolden, MergeRefusesAnOutputThatOverlapsItsInputs) {
  const std::string fixtures = kFixtures + "peft/";
  const test_data::TempDir tmp("lora_merge_overlap");
  const std::filesystem::path base = tmp.path() / "b", adapter = tmp.path() / "a";
  std::filesystem::copy(fixtures + "llama_bytes", base, std::filesystem::copy_options::recursive);
  std::filesystem::copy(fixtures + "llama_bytes_lora", adapter,
                        std::filesystem::copy_options::recursive);
  std::filesystem::create_directory_symlink(base, tmp.path() / "link");
  const std::string before = read_text_file((base / "model.safetensors").string());
  const std::string inputs = " --model " + base.string() + " --adapter " + adapter.string();
  const std::string d = tmp.path().string();
  for (const auto& [out, relation] :
       std::vector<std::pair<std::string, std::string>>{{d + "/b", "' is --model"},
                                                        {d + "/./b/", "' is --model"},
                                                        {d + "/a/../b", "' is --model"},
                                                        {d + "/link", "' is --model"},
                                                        {d + "/b/merged", "' lies inside --model"},
                                                        {d + "/a", "' is --adapter"},
                                                        {d, "' contains --model"}}) {
    SCOPED_TRACE(out);
    const CliRun run = run_cli("merge" + inputs + " --output_dir " + out);
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_NE(run.err.find("--output_dir: '" + out + relation), std::string::npos) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  }
  EXPECT_EQ(read_text_file((base / "model.safetensors").string()), before);
  EXPECT_FALSE(std::filesystem::exists(base / "merged"));

  // An earlier merge's output is replaced as a whole: no file of it is left behind.
  const std::string out = d + "/merged";
  std::filesystem::create_directories(out);
  write_file_atomically(out + "/stale.txt", "from before");
  const CliRun run = run_cli("merge" + inputs + " --output_dir " + out);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(std::filesystem::exists(out + "/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(out + "/stale.txt"));
  for (const auto& entry : std::filesystem::directory_iterator(d)) {
    EXPECT_EQ(entry.path().filename().string().find(".merged."), std::string::npos)
        << "leftover " << entry.path();
  }
}

// The config PEFT wrote, read and written again by headroom, is the same text.
TEST(LoraGolden, AdapterConfigIsWrittenAsPeftWritesIt) {
  const std::string path = kFixtures + "peft/gpt2_tiny_lora/adapter_config.json";
  const std::string text = read_text_file(path);
  const LoraConfig config = parse_lora_adapter_config(parse_json(text, path), path);
  EXPECT_EQ(config.bias, LoraBias::all);
  EXPECT_EQ(lora_adapter_config_json(config, GPT2Config{}), text);
}

}  // namespace
}  // namespace headroom
