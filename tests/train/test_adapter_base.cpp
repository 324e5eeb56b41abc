// The base under an adapter (Note [The base of an adapter]): training records it, eval and merge
// rebuild exactly that base (seed, the frozen projections' bf16, 4 bits) with no option given,
// and refuse a base that differs (another seed, preset, directory contents or 4-bit setting).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "apps/cli_run.h"
#include "core/error.h"
#include "io/pretrained.h"
#include "io/safetensors.h"
#include "nn/linear_4bit.h"
#include "peft/lora_model.h"
#include "train/adapter_base.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;
using test_data::tiny_training_args;

TrainingArguments adapter_args(const fs::path& root) {
  TrainingArguments args = tiny_training_args(root, /*dropout=*/0.0);
  args.use_peft = true;
  args.lora_r = 4;
  args.lora_alpha = 8;
  args.lora_target_modules = "c_attn,c_fc";
  args.learning_rate = 1e-2;
  args.save_strategy = "no";
  args.seed = 7;  // not eval's old 0, nor train's default 42
  return args;
}

// The ValueError's message of `f`, or "" when it throws none.
template <typename F>
std::string value_error_of(F f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

// Every tensor of `dir`'s weights equals the parameter of that name in `model`, bit for bit.
void expect_weights_equal(const std::string& dir, const CausalLM& model) {
  const SafetensorsCheckpoint weights(dir);
  std::map<std::string, Tensor> params;
  for (const auto& [name, p] : model.named_parameters()) params[name] = p;
  ASSERT_GT(weights.size(), 0u);
  for (const std::string& name : weights.names()) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(weights.load(name).to(DType::f32).to_float_vector(),
              params[name].to(DType::f32).to_float_vector())
        << name;
  }
}

double relative_gap(double a, double b) { return std::abs(a - b) / std::abs(b); }

// `headroom merge --adapter <output_dir>` with nothing else: its weights are the trained model's
// own merge (after dequantizing `four_bit_layers` 4-bit layers), bit for bit, and eval of the
// adapter scores what the merged model does. Returns the adapter's eval loss.
double expect_merge_is_the_trained_merge(const TrainingArguments& args, Trainer& trainer,
                                         const fs::path& tmp, int64_t four_bit_layers) {
  const std::string merged = (tmp / "merged").string();
  const CliRun merge = run_cli("merge --adapter " + args.output_dir + " --output_dir " + merged);
  EXPECT_EQ(merge.exit_code, 0) << merge.err;
  CausalLM& model = trainer.model();
  model.to(DType::f32);
  EXPECT_EQ(dequantize_linears(model, DType::f32), four_bit_layers);
  EXPECT_EQ(merge_lora(model), 4);  // c_attn and c_fc in two blocks
  expect_weights_equal(merged, model);
  const EvalResult with_adapter =
      evaluate_file(base_request(""), args.data, 16, 4, "cpu", args.output_dir);
  const EvalResult of_merged = evaluate_file(base_request(merged), args.data, 16, 4, "cpu");
  EXPECT_LT(relative_gap(with_adapter.loss, of_merged.loss), 1e-5)
      << with_adapter.loss << " against " << of_merged.loss;
  return with_adapter.loss;
}

// A bf16 autocast run on a config-only directory: its base is HF's init from seed 7 with the
// frozen projections rounded to bf16. merge with the adapter alone rebuilds that base: the merged
// weights are the trained model's own merge bit for bit, and eval of the adapter scores what the
// merged model scores. (Built with eval's and merge's old seed 0 in fp32, both differ.)
TEST(AdapterBase, EvalAndMergeRebuildTheBaseTrainingUsed) {
  TempDir tmp("adapter_base_bf16");
  TrainingArguments args = adapter_args(tmp.path());
  args.bf16 = true;
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  const std::optional<AdapterBase> record = read_adapter_base(args.output_dir);
  ASSERT_TRUE(record);
  EXPECT_FALSE(record->preset);
  EXPECT_EQ(record->seed, 7u);
  EXPECT_FALSE(record->weights_loaded);
  EXPECT_EQ(record->frozen_linear_dtype, DType::bf16);
  EXPECT_EQ(record->files.size(), 1u);  // config.json

  const double loss = expect_merge_is_the_trained_merge(args, trainer, tmp.path(), 0);
  // The same base named explicitly with its seed is the same base.
  AdapterBaseRequest explicit_base = base_request(args.model);
  explicit_base.seed = 7;
  EXPECT_EQ(evaluate_file(explicit_base, args.data, 16, 4, "cpu", args.output_dir).loss, loss);
}

TEST(AdapterBase, ABaseThatDiffersIsRefusedNamingTheFieldAndBothValues) {
  TempDir tmp("adapter_base_refusals");
  const TrainingArguments args = adapter_args(tmp.path());
  {
    Trainer trainer(args);
    ASSERT_EQ(trainer.train(), 0);
  }
  auto eval = [&](const AdapterBaseRequest& request) {
    return value_error_of(
        [&] { evaluate_file(request, args.data, 16, 4, "cpu", args.output_dir); });
  };
  AdapterBaseRequest other_seed = base_request(args.model);
  other_seed.seed = 0;
  std::string e = eval(other_seed);
  EXPECT_NE(e.find("adapter_base.json: --seed"), std::string::npos) << e;
  EXPECT_NE(e.find("seed 7"), std::string::npos) << e;
  EXPECT_NE(e.find("seed 0"), std::string::npos) << e;
  e = eval(base_request("gpt2-tiny"));
  EXPECT_NE(e.find("--model"), std::string::npos) << e;
  EXPECT_NE(e.find("preset 'gpt2-tiny'"), std::string::npos) << e;
  AdapterBaseRequest four_bit = base_request("");
  four_bit.load_in_4bit = true;
  e = eval(four_bit);
  EXPECT_NE(e.find("--load_in_4bit"), std::string::npos) << e;
  AdapterBaseRequest bnb_alone = base_request("");
  bnb_alone.quant_type = Quant4bitType::nf4;
  e = eval(bnb_alone);
  EXPECT_NE(e.find("--bnb_4bit_*"), std::string::npos) << e;
  // The same run's config.json edited: another directory's contents.
  std::ofstream(fs::path(args.model) / "config.json", std::ios::app) << "\n";
  e = eval(base_request(""));
  EXPECT_NE(e.find("config.json of"), std::string::npos) << e;

  // An adapter with no record (PEFT's): --model is then required, and the seed is train's 42.
  fs::remove(fs::path(args.output_dir) / kAdapterBaseFile);
  e = eval(base_request(""));
  EXPECT_NE(e.find("--model: required"), std::string::npos) << e;
  EXPECT_EQ(resolve_adapter_base(base_request(args.model), args.output_dir).seed, 42u);
}

// A resume trains the saved adapters on: on another base (a seed that draws other weights,
// another precision's frozen projections, 4 bits) or with other LoRA options it is refused
// before anything is loaded, by the checkpoint's training_config.json (Note [What a resume may
// change]); adapter_base.json's digests guard the base's files.
TEST(AdapterBase, AResumeOnAnotherBaseIsRefused) {
  TempDir tmp("adapter_base_resume");
  TrainingArguments args = adapter_args(tmp.path());
  args.save_strategy = "steps";
  args.save_steps = 2;
  args.max_steps = 2;
  {
    Trainer trainer(args);
    ASSERT_EQ(trainer.train(), 0);
  }
  args.resume_from_checkpoint = "last";
  args.max_steps = 4;
  TrainingArguments other_seed = args;
  other_seed.seed = 8;
  std::string e = value_error_of([&] { Trainer(other_seed).train(); });
  EXPECT_NE(e.find("checkpoint-2/training_config.json: seed is 7 in the checkpoint and 8 in this "
                   "run"),
            std::string::npos)
      << e;
  TrainingArguments bf16 = args;
  bf16.bf16 = true;
  e = value_error_of([&] { Trainer(bf16).train(); });
  EXPECT_NE(e.find("precision is fp32 in the checkpoint and bf16 in this run"), std::string::npos)
      << e;
  // The adapters' own options: another scaling or rank.
  TrainingArguments other_alpha = args;
  other_alpha.lora_alpha = 16;
  e = value_error_of([&] { Trainer(other_alpha).train(); });
  EXPECT_NE(e.find("checkpoint-2/training_config.json: lora_alpha is 8.0 in the checkpoint and "
                   "16.0 in this run"),
            std::string::npos)
      << e;
  TrainingArguments other_targets = args;
  other_targets.lora_target_modules = "c_attn";
  e = value_error_of([&] { Trainer(other_targets).train(); });
  EXPECT_NE(e.find("lora_target_modules is c_attn,c_fc in the checkpoint and c_attn"),
            std::string::npos)
      << e;
  // A 4-bit base where a full-precision one trained.
  TrainingArguments four_bit = args;
  four_bit.load_in_4bit = true;
  e = value_error_of([&] { Trainer(four_bit).train(); });
  EXPECT_NE(e.find("load_in_4bit is unset in the checkpoint and {\"bnb_4bit_quant_type\":\"fp4\""),
            std::string::npos)
      << e;
  Trainer same(args);
  EXPECT_EQ(same.train(), 0);
  // eval of an adapter checkpoint checks its checksums.json, as a model checkpoint's.
  const fs::path checkpoint = fs::path(args.output_dir) / "checkpoint-4";
  const std::string weights = (checkpoint / "adapter_model.safetensors").string();
  EXPECT_NO_THROW(evaluate_file(base_request(""), args.data, 16, 4, "cpu", checkpoint.string()));
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  e = value_error_of(
      [&] { evaluate_file(base_request(""), args.data, 16, 4, "cpu", checkpoint.string()); });
  EXPECT_NE(e.find("adapter_model.safetensors"), std::string::npos) << e;
}

// A base with weights may move (a copy scores the same, the seed does not enter it); the same
// path with other weights is refused naming the weights file.
TEST(AdapterBase, ADirectoryBaseIsKnownByItsFilesNotItsPath) {
  TempDir tmp("adapter_base_directory");
  TrainingArguments args = adapter_args(tmp.path());
  const std::unique_ptr<CausalLM> base = load_pretrained(args.model, kCPU, 3);
  const fs::path with_weights = tmp.path() / "base";
  save_pretrained(*base, with_weights.string());
  args.model = with_weights.string();
  {
    Trainer trainer(args);
    ASSERT_EQ(trainer.train(), 0);
  }
  const std::optional<AdapterBase> record = read_adapter_base(args.output_dir);
  ASSERT_TRUE(record);
  EXPECT_TRUE(record->weights_loaded);
  ASSERT_EQ(record->files.size(), 2u);
  EXPECT_EQ(record->files[1].name, "model.safetensors");

  const double loss =
      evaluate_file(base_request(""), args.data, 16, 4, "cpu", args.output_dir).loss;
  const fs::path copy = tmp.path() / "copy";
  fs::copy(with_weights, copy);
  AdapterBaseRequest moved = base_request(copy.string());
  moved.seed = 99;
  EXPECT_EQ(evaluate_file(moved, args.data, 16, 4, "cpu", args.output_dir).loss, loss);

  save_pretrained(*load_pretrained(fs::path(tmp.path() / "model").string(), kCPU, 4),
                  with_weights.string());
  const std::string e = value_error_of(
      [&] { evaluate_file(base_request(""), args.data, 16, 4, "cpu", args.output_dir); });
  EXPECT_NE(e.find("model.safetensors of"), std::string::npos) << e;
  EXPECT_NE(e.find("CRC-32C"), std::string::npos) << e;
}

// A QLoRA adapter is scored and merged on its 4-bit base (nf4, double quantization) with no
// option given: merge dequantizes each 4-bit weight and adds the delta, as the trained model's own
// merge does, and eval of the adapter scores what the merged model scores. Full precision asked
// for instead is refused.
TEST(AdapterBase, AQloraAdapterIsScoredAndMergedOnItsFourBitBase) {
  TempDir tmp("adapter_base_qlora");
  TrainingArguments args = adapter_args(tmp.path());
  args.load_in_4bit = true;
  args.bnb_4bit_quant_type = "nf4";
  args.bnb_4bit_use_double_quant = true;
  Trainer trainer(args);
  ASSERT_EQ(trainer.train(), 0);
  const std::optional<AdapterBase> record = read_adapter_base(args.output_dir);
  ASSERT_TRUE(record && record->load_in_4bit);
  EXPECT_EQ(record->load_in_4bit->quant_type, Quant4bitType::nf4);
  EXPECT_TRUE(record->load_in_4bit->double_quant);

  // 4 projections x 2 blocks are 4-bit.
  expect_merge_is_the_trained_merge(args, trainer, tmp.path(), 8);

  const std::string common = " --adapter " + args.output_dir + " --data " + args.data +
                             " --max_seq_length 16 --device cpu";
  expect_usage_error("eval" + common + " --load_in_4bit false",
                     "--load_in_4bit: the adapter "
                     "was trained on a 4-bit base");
  expect_usage_error("eval" + common + " --bnb_4bit_quant_type fp4", "not a 4-bit base (fp4");
  const CliRun same = run_cli("eval" + common + " --load_in_4bit --bnb_4bit_quant_type nf4 --json");
  EXPECT_EQ(same.exit_code, 0) << same.err;
}

}  // namespace
}  // namespace headroom
