// Llama 3's and Qwen2's tokenizer.json against HF tokenizers: ids with and without the
// post-processor's special tokens, decodings, NFC, and the refusal of what headroom does not
// implement (tests/fixtures/tokenizer/regex_reference.json, tools/gen_tokenizer_regex_fixtures.py).
#include <gtest/gtest.h>

#include "io/gpt2_bpe_tokenizer.h"
#include "io/io_test_helpers.h"
#include "io/tokenizer_reference.h"
#include "io/unicode_nfc.h"

namespace headroom {
namespace {

using io_test::expect_error;
using io_test::TempDir;
using io_test::tokenizer_fixture;
using json = nlohmann::json;

const json& regex_reference() { return io_test::tokenizer_reference_file("regex_reference.json"); }

void expect_family_equals_hf(const std::string& family) {
  const auto tokenizer = load_tokenizer(tokenizer_fixture(family));
  io_test::expect_tokenizer_matches_reference(*tokenizer, regex_reference()[family],
                                              regex_reference()["texts"], family);
}

TEST(TokenizerRegexBpe, Llama3IdsEqualHf) { expect_family_equals_hf("llama3"); }

TEST(TokenizerRegexBpe, Qwen2IdsEqualHf) { expect_family_equals_hf("qwen2"); }

TEST(TokenizerRegexBpe, EosTokenFromTokenizerConfig) {
  const auto llama = load_tokenizer(tokenizer_fixture("llama3"));
  const auto* bpe = dynamic_cast<const Gpt2BpeTokenizer*>(llama.get());
  ASSERT_NE(bpe, nullptr);
  EXPECT_EQ(llama->eos_token_id(), bpe->token_to_id("<|end_of_text|>"));
  const auto qwen = load_tokenizer(tokenizer_fixture("qwen2"));
  EXPECT_EQ(qwen->eos_token_id(),
            dynamic_cast<const Gpt2BpeTokenizer&>(*qwen).token_to_id("<|endoftext|>"));

  TempDir dir;
  io_test::write_bytes(dir.file("tokenizer.json"),
                       read_text_file(tokenizer_fixture("llama3/tokenizer.json")));
  io_test::write_bytes(dir.file("tokenizer_config.json"),
                       R"({"eos_token": {"content": "<|eot_id|>"}})");
  EXPECT_EQ(load_tokenizer(dir.str())->eos_token_id(), bpe->token_to_id("<|eot_id|>"));
  io_test::write_bytes(dir.file("tokenizer_config.json"), R"({"eos_token": "<|nope|>"})");
  expect_error<ValueError>([&] { load_tokenizer(dir.str()); },
                           {dir.file("tokenizer_config.json"), "eos_token \"<|nope|>\""});
}

TEST(TokenizerRegexBpe, Llama3PiecesFollowItsRegex) {
  using R = Gpt2BpeTokenizer::SplitRegex;
  const auto pieces = [](R regex, std::string_view text) {
    std::vector<std::string> out;
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = Gpt2BpeTokenizer::split_pretoken_end(regex, text, pos);
      out.emplace_back(text.substr(pos, end - pos));
      pos = end;
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(R::llama3, "x'ſound IT'S"), (V{"x", "'ſ", "ound", " IT", "'S"}));
  EXPECT_EQ(pieces(R::llama3, "1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(pieces(R::qwen2, "123"), (V{"1", "2", "3"}));
  EXPECT_EQ(pieces(R::llama3, "  \n  x!!\n\n"), (V{"  \n", " ", " x", "!!\n\n"}));
  EXPECT_EQ(pieces(R::llama3, "!!abc \tb end  "), (V{"!!", "abc", " ", "\tb", " end", "  "}));
}

TEST(TokenizerRegexBpe, NfcComposesReordersAndKeepsInvalidBytes) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("\u212b"), "\u00c5");         // a singleton decomposition
  EXPECT_EQ(nfc("o\u0323\u0302"), "\u1ed9");  // reordered, then composed
  EXPECT_EQ(nfc("o\u0302\u0323"), "\u1ed9");
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul L V T
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");        // a composition exclusion
  EXPECT_EQ(nfc("a\xff\u0301"), "a\xff\u0301");    // nothing composes across a bad byte
  EXPECT_EQ(nfc("plain ASCII"), "plain ASCII");
}

TEST(TokenizerRegexBpe, UnsupportedFieldsAreRefusedByName) {
  const io_test::EditedTokenizerJson edited("llama3");
  const json& good = edited.good;
  const std::string& path = edited.path;
  const auto load_with = [&](const json& root) { edited.load(root); };
  json bad = good;
  bad["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  expect_error<NotImplementedError>([&] { load_with(bad); },
                                    {path, "pre_tokenizer.pretokenizers[0].pattern", "\\\\s+"});
  bad = good;
  bad["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_error<NotImplementedError>([&] { load_with(bad); },
                                    {path, "pretokenizers[0].behavior", "Removed"});
  bad = good;
  bad["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
  expect_error<NotImplementedError>([&] { load_with(bad); },
                                    {path, "pretokenizers[1].use_regex", "true"});
  bad = good;
  bad["post_processor"]["processors"][1]["type"] = "RobertaProcessing";
  expect_error<NotImplementedError>([&] { load_with(bad); },
                                    {path, "post_processor.processors[1].type", "Roberta"});
  bad = good;
  bad["normalizer"] = json{{"type", "NFKC"}};
  expect_error<NotImplementedError>([&] { load_with(bad); }, {path, "normalizer", "NFKC"});
  bad = good;
  bad["model"]["byte_fallback"] = true;
  expect_error<NotImplementedError>([&] { load_with(bad); }, {path, "model.byte_fallback true"});
}

}  // namespace
}  // namespace headroom
