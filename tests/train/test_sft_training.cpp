// SFT rows through `headroom eval` and the Trainer: eval's loss and scored-token count against
// transformers on TRL's prepared rows (tests/fixtures/data/sft_eval, made by
// tools/gen_sft_eval_reference.py with the qwen2_sft_tiny model); training on prompt / completion,
// conversational and packed rows; the options' errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/sft_examples.h"
#include "train/data_loader_batch_source.h"
#include "train/evaluation.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;

const std::string kFixtures = HEADROOM_FIXTURES_DIR;

TEST(SftEval, LossAndTokensEqualTransformersOnTrlsPreparedRows) {
  std::ifstream file(kFixtures + "/data/sft_eval/reference.json");
  ASSERT_TRUE(file) << "missing tests/fixtures/data/sft_eval/reference.json";
  const nlohmann::json reference = nlohmann::json::parse(file);
  const std::string model = kFixtures + "/models/qwen2_sft_tiny";
  int64_t checked = 0;
  for (const auto& [name, expected] : reference.items()) {
    if (!expected.is_object()) continue;
    SCOPED_TRACE(name);
    SftRowOptions rows;
    const auto& options = expected["options"];
    if (!options["completion_only_loss"].is_null()) {
      rows.completion_only_loss = options["completion_only_loss"].get<bool>();
    }
    rows.assistant_only_loss = options["assistant_only_loss"].get<bool>();
    const std::string data =
        str_cat(kFixtures, "/data/sft_eval/", expected["file"].get<std::string>());
    // Batches of 2 rows: padded, so the padding must neither be scored nor change the rest.
    const EvalResult result =
        evaluate_file(base_request(model), data, 0, /*batch_size=*/2, "cpu", "", rows);
    EXPECT_EQ(result.tokens, expected["tokens"].get<int64_t>());
    // The bound: fp32 logits summed in another order than PyTorch's, the mean in double.
    const double want = expected["loss"].get<double>();
    EXPECT_NEAR(result.loss, want, 1e-5 * want);
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

// A prompt / completion file, a conversation file and a template for the byte-level tiny GPT-2,
// each row within its context of 16 bytes.
struct SftFiles {
  std::string prompt_completion, messages, chat_template;
};

SftFiles write_sft_files(const fs::path& root) {
  SftFiles files{(root / "pc.jsonl").string(), (root / "chat.jsonl").string(),
                 (root / "chat.jinja").string()};
  std::ofstream pc(files.prompt_completion);
  std::ofstream chat(files.messages);
  for (int i = 0; i < 24; ++i) {
    const nlohmann::json row = {{"prompt", str_cat("Q", i, "? ")},
                                {"completion", str_cat("It is ", i * 7 % 10, ".")}};
    pc << row.dump() << "\n";
    const nlohmann::json conversation = {
        {"messages",
         {{{"role", "user"}, {"content", str_cat("h", i)}},
          {{"role", "assistant"}, {"content", str_cat("ok", i % 3)}}}}};
    chat << conversation.dump() << "\n";
  }
  std::ofstream(files.chat_template)
      << "{% for m in messages %}{{ m.role[0] }}:{% if m.role == 'assistant' %}{% generation %}"
         "{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}";
  return files;
}

TEST(SftTraining, PromptCompletionRowsTrainAndEvaluateOnTheCompletion) {
  TempDir tmp("sft_train_pc");
  TrainingArguments args = test_data::tiny_training_args(tmp.path(), 0.0);
  const SftFiles files = write_sft_files(tmp.path());
  args.data = files.prompt_completion;
  args.eval_strategy = "steps";
  args.eval_steps = 4;
  args.validation_split_percentage = 25.0;  // 6 of the 24 rows held out
  args.gradient_accumulation_steps = 2;
  Trainer trainer(args);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isfinite(trainer.step().loss));
  const EvalResult eval = trainer.evaluate();
  // 6 rows of "It is N." (8 bytes, the byte tokenizer has no EOS): 8 targets each.
  EXPECT_EQ(eval.tokens, 6 * 8);
  EXPECT_TRUE(std::isfinite(eval.loss));
}

TEST(SftTraining, AccumulatedStepEqualsTheBigBatchOverScoredTokens) {
  // Two rows scoring 1 target each, then two scoring 12: two micro-batches of 2 must weigh each
  // by its share of the step's 26 scored targets (transformers' num_items_in_batch), as one
  // batch of 4 does, or the update (and the next step's loss) differs.
  std::vector<SftExample> examples;
  for (int i = 0; i < 4; ++i) {
    SftExample e;
    for (int t = 0; t < 14; ++t) e.input_ids.push_back(32 + (i * 5 + t * 3) % 90);
    e.labels = e.input_ids;
    const int unscored = i < 2 ? 12 : 1;  // labels 1.. are targets: 1 or 12 of them scored
    std::fill(e.labels.begin(), e.labels.begin() + 1 + unscored, -100);
    examples.push_back(std::move(e));
  }
  const auto set = std::make_shared<const SftExamples>(examples, SftBatching{});
  std::vector<double> second_losses;
  for (const int64_t accumulation : {1, 2}) {
    TempDir tmp("sft_accumulation");
    TrainingArguments args = test_data::tiny_training_args(tmp.path(), 0.0);
    args.per_device_train_batch_size = 4 / accumulation;
    args.gradient_accumulation_steps = accumulation;
    args.learning_rate = 1e-2;
    args.warmup_steps = 0;
    const BatchSourceFactory in_order = [&](const TrainingArguments& a, const Tokenizer&, int64_t,
                                            Device device) {
      return std::make_unique<DataLoaderBatchSource>(
          set, nullptr, 16, "rows",
          DataLoaderOptions{.batch_size = a.per_device_train_batch_size, .shuffle = false}, device);
    };
    Trainer trainer(args, in_order);
    trainer.step();
    second_losses.push_back(trainer.step().loss);
  }
  // The same targets summed in another grouping, in fp32.
  EXPECT_NEAR(second_losses[1], second_losses[0], 1e-5 * second_losses[0]);
}

TEST(SftTraining, ConversationsTrainWithAnAssistantOnlyLossAndPacking) {
  for (const bool packing : {false, true}) {
    SCOPED_TRACE(packing ? "packed" : "padded");
    TempDir tmp("sft_train_chat");
    TrainingArguments args = test_data::tiny_training_args(tmp.path(), 0.0);
    const SftFiles files = write_sft_files(tmp.path());
    args.data = files.messages;
    args.chat_template_path = files.chat_template;
    args.assistant_only_loss = true;
    args.packing = packing;
    args.validation_split_percentage = 0.0;
    Trainer trainer(args);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isfinite(trainer.step().loss));
  }
}

TEST(SftTraining, ConversationsWithoutATemplateAreRefusedNamingTheRow) {
  TempDir tmp("sft_no_template");
  TrainingArguments args = test_data::tiny_training_args(tmp.path(), 0.0);
  args.data = write_sft_files(tmp.path()).messages;
  try {
    Trainer trainer(args);
    FAIL() << "trained conversations without a chat template";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("chat.jsonl:1: conversational data needs a chat template"),
              std::string::npos)
        << e.what();
  }
}

TEST(SftTraining, PackingStrategiesAreTrlsNames) {
  TrainingArguments args;
  args.packing_strategy = "bfd_split";
  EXPECT_EQ(resolve_training_config(args).packing_strategy, PackingStrategy::bfd_split);
  args.packing_strategy = "bfd-requeue";  // TRL's old name, still taken
  EXPECT_EQ(resolve_training_config(args).packing_strategy, PackingStrategy::bfd_split);
  args.packing_strategy = "first_fit";
  EXPECT_THROW(resolve_training_config(args), ValueError);
}

}  // namespace
}  // namespace headroom
