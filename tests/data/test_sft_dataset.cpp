// data/sft_dataset.h and data/sft_examples.h against TRL itself: SFTTrainer._prepare_dataset's
// input_ids, labels, kept rows and packed rows for every dataset format, with truncation, EOS,
// completion-only and assistant-only losses and packing (tests/fixtures/data/trl_sft.json, made
// by tools/gen_trl_sft_golden.py with the fixture tokenizers and chat templates); and the
// batches the examples collate into.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/sft_dataset.h"
#include "data/sft_examples.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace headroom {
namespace {

const std::string kFixtures = HEADROOM_FIXTURES_DIR;

nlohmann::ordered_json trl_cases() {
  std::ifstream file(kFixtures + "/data/trl_sft.json");
  EXPECT_TRUE(file) << "missing tests/fixtures/data/trl_sft.json";
  return nlohmann::ordered_json::parse(file)["cases"];
}

std::vector<int64_t> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data<int64_t>(), c.data<int64_t>() + c.numel()};
}

struct Case {
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  SftChat chat;
  SftOptions options;
  std::string packing_strategy;
  std::vector<SftRow> rows;
};

Case make_case(const nlohmann::ordered_json& c) {
  Case out;
  const std::string dir = kFixtures + "/tokenizer/" + c["tokenizer"].get<std::string>();
  out.tokenizer = load_tokenizer(dir);
  out.chat.special_tokens = read_special_tokens(dir);
  if (c["chat_template"].is_string()) {
    out.chat_template.emplace(c["chat_template"].get<std::string>(), c["name"].get<std::string>());
    out.chat.chat_template = &*out.chat_template;
  }
  const auto& o = c["options"];
  out.options.dataset_text_field = o["dataset_text_field"].get<std::string>();
  if (!o["completion_only_loss"].is_null()) {
    out.options.completion_only_loss = o["completion_only_loss"].get<bool>();
  }
  out.options.assistant_only_loss = o["assistant_only_loss"].get<bool>();
  out.options.max_length = o["max_length"].is_null()
                               ? std::nullopt
                               : std::optional<int64_t>(o["max_length"].get<int64_t>());
  out.options.packing = o["packing"].get<bool>();
  if (o["eos_token"].is_string()) out.options.eos_token = o["eos_token"].get<std::string>();
  out.packing_strategy = o["packing_strategy"].get<std::string>();
  int64_t line = 0;
  for (const auto& row : c["rows"]) out.rows.push_back({row, "case.jsonl", ++line});
  return out;
}

TEST(SftDataset, InputIdsAndLabelsEqualTrlsPreparation) {
  int64_t checked = 0;
  for (const auto& c : trl_cases()) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    if (!c.contains("expected") || c["options"]["packing"].get<bool>()) continue;
    const Case k = make_case(c);
    const SftDataset dataset =
        prepare_sft_dataset(k.rows, "case.jsonl", *k.tokenizer, k.chat, k.options);
    const auto& expected = c["expected"];
    ASSERT_EQ(dataset.examples.size(), expected["input_ids"].size());
    for (size_t i = 0; i < dataset.examples.size(); ++i) {
      EXPECT_EQ(dataset.examples[i].input_ids, expected["input_ids"][i].get<std::vector<int64_t>>())
          << "example " << i;
      EXPECT_EQ(dataset.examples[i].labels, expected["labels"][i].get<std::vector<int64_t>>())
          << "example " << i;
    }
    EXPECT_EQ(dataset.rows, expected["kept"].get<std::vector<int64_t>>());
    EXPECT_EQ(dataset.dropped, static_cast<int64_t>(k.rows.size() - dataset.rows.size()));
    ++checked;
  }
  EXPECT_GE(checked, 35) << "the fixture lost its cases";
}

TEST(SftDataset, PackedRowsEqualTrlsPacking) {
  int64_t checked = 0;
  for (const auto& c : trl_cases()) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    if (!c.contains("expected") || !c["options"]["packing"].get<bool>()) continue;
    const Case k = make_case(c);
    const SftDataset dataset =
        prepare_sft_dataset(k.rows, "case.jsonl", *k.tokenizer, k.chat, k.options);
    SftBatching batching;
    batching.packing = true;
    batching.packing_strategy = k.packing_strategy == "bfd"         ? PackingStrategy::bfd
                                : k.packing_strategy == "bfd_split" ? PackingStrategy::bfd_split
                                                                    : PackingStrategy::wrapped;
    batching.max_length = *k.options.max_length;
    const SftExamples examples(dataset.examples, batching);
    const auto& expected = c["expected"];
    ASSERT_EQ(examples.size(), static_cast<int64_t>(expected["input_ids"].size()));
    for (int64_t r = 0; r < examples.size(); ++r) {
      const auto e = static_cast<size_t>(r);
      EXPECT_EQ(examples.sample(r).input_ids, expected["input_ids"][e].get<std::vector<int64_t>>());
      EXPECT_EQ(examples.sample(r).labels, expected["labels"][e].get<std::vector<int64_t>>());
      if (!expected["seq_lengths"].is_null()) {
        EXPECT_EQ(examples.sample(r).seq_lengths,
                  expected["seq_lengths"][e].get<std::vector<int64_t>>());
      }
    }
    EXPECT_EQ(examples.padding_free(), batching.packing_strategy != PackingStrategy::wrapped);
    ++checked;
  }
  EXPECT_GE(checked, 7) << "the fixture lost its packing cases";
}

TEST(SftDataset, RefusesWhatTrlRefusesNamingTheRow) {
  // TRL's own messages differ (a template check at SFTTrainer's construction, an AttributeError
  // for mixed rows); ours name the file, row and field.
  const std::vector<std::pair<std::string, std::string>> expected_messages = {
      {"error_assistant_only_no_generation_marks", "case.jsonl:1: assistant_only_loss"},
      {"error_assistant_only_no_assistant_turn", "has no assistant tokens"},
      {"error_assistant_only_not_conversational", "only conversations have assistant turns"},
      {"error_mixed_formats", "case.jsonl:2: the row is"},
  };
  int64_t checked = 0;
  for (const auto& c : trl_cases()) {
    if (!c.contains("error")) continue;
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const Case k = make_case(c);
    std::string message;
    try {
      prepare_sft_dataset(k.rows, "case.jsonl", *k.tokenizer, k.chat, k.options);
    } catch (const ValueError& e) {
      message = e.what();
    }
    for (const auto& [case_name, part] : expected_messages) {
      if (case_name == name) {
        EXPECT_NE(message.find(part), std::string::npos) << message;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4);
}

TEST(SftExamples, PaddedBatchScoresEachRowsShiftedLabelsAndNoPadding) {
  const std::vector<SftExample> examples = {{{5, 6, 7, 8}, {-100, -100, 7, 8}}, {{9, 10}, {9, 10}}};
  const SftExamples set(examples, {.pad_id = 3});
  const std::vector<int64_t> order = {1, 0};
  const TokenBatch batch = set.collate(order);
  EXPECT_EQ(batch.input_ids.shape(), (Shape{2, 4}));
  EXPECT_EQ(values_of(batch.input_ids), (std::vector<int64_t>{9, 10, 3, 3, 5, 6, 7, 8}));
  EXPECT_EQ(values_of(batch.targets),
            (std::vector<int64_t>{10, -100, -100, -100, -100, 7, 8, -100}));
  EXPECT_EQ(batch.target_count, 3);
  EXPECT_TRUE(batch.cu_seqlens.empty());
  EXPECT_TRUE(batch.varying_targets);
}

TEST(SftExamples, PaddingFreeBatchIsOneRowWithEverySequencesStart) {
  const std::vector<SftExample> examples = {{{5, 6, 7}, {5, 6, 7}}, {{9, 10}, {-100, 10}}};
  const SftExamples set(examples, {.padding_free = true});
  const std::vector<int64_t> order = {0, 1};
  const TokenBatch batch = set.collate(order);
  EXPECT_EQ(batch.input_ids.shape(), (Shape{1, 5}));
  EXPECT_EQ(values_of(batch.targets), (std::vector<int64_t>{6, 7, -100, 10, -100}));
  EXPECT_EQ(batch.cu_seqlens, (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(batch.target_count, 3);
}

// ShareGPT's {"from", "value"} turns become messages as TRL's maybe_convert_to_chatml makes
// them: human -> user, gpt -> assistant, system stays.
TEST(SftDataset, ShareGptConversationsAreMessages) {
  const auto tokenizer = load_tokenizer(kFixtures + "/tokenizer/qwen2");
  const ChatTemplate chat_template(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
      "chatml");
  const SftChat chat{&chat_template, read_special_tokens(kFixtures + "/tokenizer/qwen2")};
  const nlohmann::ordered_json share_gpt = {{"conversations",
                                             {{{"from", "system"}, {"value", "Be brief."}},
                                              {{"from", "human"}, {"value", "Hi?"}},
                                              {{"from", "gpt"}, {"value", "Hello."}}}}};
  const nlohmann::ordered_json messages = {{"messages",
                                            {{{"role", "system"}, {"content", "Be brief."}},
                                             {{"role", "user"}, {"content", "Hi?"}},
                                             {{"role", "assistant"}, {"content", "Hello."}}}}};
  const SftDataset a =
      prepare_sft_dataset({{share_gpt, "a.jsonl", 1}}, "a.jsonl", *tokenizer, chat, {});
  const SftDataset b =
      prepare_sft_dataset({{messages, "b.jsonl", 1}}, "b.jsonl", *tokenizer, chat, {});
  EXPECT_EQ(a.format, SftFormat::conversational);
  ASSERT_EQ(a.examples.size(), 1u);
  EXPECT_EQ(a.examples[0].input_ids, b.examples[0].input_ids);
  EXPECT_EQ(a.examples[0].labels, b.examples[0].labels);
}

TEST(SftRows, JsonListsJsonlAndDirectoriesOfThemAreRowsTextIsNot) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("headroom_sft_rows_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir / "rows");
  std::ofstream(dir / "rows" / "a.json") << R"([{"text": "one"}, {"text": "two"}])";
  std::ofstream(dir / "rows" / "b.jsonl") << "{\"text\": \"three\"}\n\n{\"text\": \"four\"}\n";
  EXPECT_TRUE(is_row_data((dir / "rows").string()));
  const std::vector<SftRow> rows = read_sft_rows((dir / "rows").string());
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1].value["text"], "two");
  EXPECT_EQ(rows[1].line, 2);  // the index in the list, from 1
  EXPECT_EQ(rows[3].value["text"], "four");
  EXPECT_EQ(rows[3].line, 3);  // the blank line counts, as editors count it
  std::ofstream(dir / "notes.txt") << "plain text";
  EXPECT_FALSE(is_row_data((dir / "notes.txt").string()));
  std::ofstream(dir / "rows" / "c.txt") << "plain text";
  EXPECT_THROW(is_row_data((dir / "rows").string()), ValueError);  // rows mixed with text
  std::ofstream(dir / "bad.json") << R"({"text": "not a list"})";
  EXPECT_THROW(read_sft_rows((dir / "bad.json").string()), ValueError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headroom
