// GPT-2 byte-level BPE against HF tokenizers: ids, decodings, both file forms, the pre-tokenizer's
// pieces, and the errors of malformed tokenizer.json files.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "io/gpt2_bpe_tokenizer.h"
#include "io/io_test_helpers.h"
#include "io/tokenizer_reference.h"

namespace headroom {
namespace {

using io_test::expect_error;
using io_test::TempDir;
using io_test::tokenizer_fixture;
using io_test::tokenizer_reference;
using json = nlohmann::json;

std::vector<int32_t> ids_of(const json& ids) { return ids.get<std::vector<int32_t>>(); }

void expect_reference_ids(const Tokenizer& tokenizer) {
  const json& ref = tokenizer_reference();
  const json& texts = ref["texts"];
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    EXPECT_EQ(tokenizer.encode(text), ids_of(ref["gpt2_bpe"]["ids"][i]))
        << "text " << i << ": \"" << text << "\"";
  }
}

TEST(TokenizerGpt2Bpe, TokenizerJsonIdsEqualHf) {
  expect_reference_ids(
      *Gpt2BpeTokenizer::from_tokenizer_json(tokenizer_fixture("gpt2_bpe/tokenizer.json")));
}

TEST(TokenizerGpt2Bpe, VocabAndMergesIdsEqualHf) {
  expect_reference_ids(*Gpt2BpeTokenizer::from_vocab_and_merges(
      tokenizer_fixture("gpt2_bpe/vocab.json"), tokenizer_fixture("gpt2_bpe/merges.txt")));
}

TEST(TokenizerGpt2Bpe, StringFormMergesGiveTheSameIds) {
  json root = parse_json(read_text_file(tokenizer_fixture("gpt2_bpe/tokenizer.json")), "fixture");
  ASSERT_TRUE(root["model"]["merges"][0].is_array());
  for (json& merge : root["model"]["merges"]) {
    merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  }
  TempDir dir;
  io_test::write_bytes(dir.file("tokenizer.json"), root.dump());
  expect_reference_ids(*Gpt2BpeTokenizer::from_tokenizer_json(dir.file("tokenizer.json")));
}

TEST(TokenizerGpt2Bpe, DecodeEqualsHfAndRoundTrips) {
  const auto tokenizer =
      Gpt2BpeTokenizer::from_tokenizer_json(tokenizer_fixture("gpt2_bpe/tokenizer.json"));
  const json& ref = tokenizer_reference();
  for (size_t i = 0; i < ref["texts"].size(); ++i) {
    const std::string text = ref["texts"][i].get<std::string>();
    EXPECT_EQ(tokenizer->decode(ids_of(ref["gpt2_bpe"]["ids"][i])),
              ref["gpt2_bpe"]["decoded"][i].get<std::string>())
        << "text " << i;
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text) << "text " << i;
  }
  // Single tokens that hold part of a character decode to U+FFFD, as in HF.
  const std::vector<int32_t> first = ids_of(ref["gpt2_bpe"]["ids"][0]);
  for (size_t k = 0; k < first.size(); ++k) {
    EXPECT_EQ(tokenizer->decode(std::span(&first[k], 1)),
              ref["gpt2_bpe"]["decoded_each"][k].get<std::string>())
        << "token " << k;
  }
}

TEST(TokenizerGpt2Bpe, VocabSizeEosKindAndSpecialToken) {
  const auto tokenizer =
      Gpt2BpeTokenizer::from_tokenizer_json(tokenizer_fixture("gpt2_bpe/tokenizer.json"));
  const json& ref = tokenizer_reference()["gpt2_bpe"];
  EXPECT_EQ(tokenizer->vocab_size(), ref["vocab_size"].get<int64_t>());
  EXPECT_EQ(tokenizer->eos_token_id(), ref["eos_token_id"].get<int32_t>());
  EXPECT_EQ(tokenizer->kind(), "gpt2_bpe");
  const int32_t eos = *tokenizer->eos_token_id();
  EXPECT_EQ(tokenizer->encode("<|endoftext|>"), std::vector<int32_t>{eos});
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{eos, eos}), "<|endoftext|><|endoftext|>");
  expect_error<ValueError>([&] { tokenizer->decode(std::vector<int32_t>{1500}); },
                           {"token id 1500", "size 1500"});
  expect_error<ValueError>([&] { tokenizer->decode(std::vector<int32_t>{-1}); }, {"token id -1"});
}

// The regex's pieces for texts whose split HF's ByteLevel pre-tokenizer was asked about.
std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = Gpt2BpeTokenizer::pretoken_end(text, pos);
    out.emplace_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

TEST(TokenizerGpt2Bpe, PreTokenizerPiecesEqualHf) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("I'M don'T it's ?'s"),
            (V{"I", "'", "M", " don", "'", "T", " it", "'s", " ?'", "s"}));
  EXPECT_EQ(pieces("a  \t\n b  "), (V{"a", "  \t\n", " b", "  "}));
  EXPECT_EQ(pieces("3.14 ½ Ⅻ ٣"), (V{"3", ".", "14", " ½", " Ⅻ", " ٣"}));
  EXPECT_EQ(pieces("中文 é ü 🙂"), (V{"中文", " é", " ü", " 🙂"}));
  EXPECT_EQ(pieces("a\u0301b"), (V{"a", "\u0301", "b"}));  // a combining mark is not \p{L}
  EXPECT_EQ(pieces("a\u00a0\u00a0b"), (V{"a", "\u00a0", "\u00a0", "b"}));  // NBSP is \s
  EXPECT_EQ(pieces("a\u200b\u200bb"), (V{"a", "\u200b\u200b", "b"}));      // ZWSP is not
  EXPECT_EQ(pieces("we'll they're I've"), (V{"we", "'ll", " they", "'re", " I", "'ve"}));
  EXPECT_EQ(pieces(" "), (V{" "}));
}

TEST(TokenizerGpt2Bpe, InvalidUtf8IsEncodedByteByByte) {
  const auto tokenizer =
      Gpt2BpeTokenizer::from_tokenizer_json(tokenizer_fixture("gpt2_bpe/tokenizer.json"));
  const std::string bytes = "ok \xff\xfe and \xe4\xb8";
  const std::vector<int32_t> ids = tokenizer->encode(bytes);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(tokenizer->decode(ids), "ok \xEF\xBF\xBD\xEF\xBF\xBD and \xEF\xBF\xBD");
}

TEST(TokenizerGpt2Bpe, ThreadsShareTheCache) {
  const auto tokenizer =
      Gpt2BpeTokenizer::from_tokenizer_json(tokenizer_fixture("gpt2_bpe/tokenizer.json"));
  const json& ref = tokenizer_reference();
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < ref["texts"].size(); ++i) {
          if (tokenizer->encode(ref["texts"][i].get<std::string>()) !=
              ids_of(ref["gpt2_bpe"]["ids"][i])) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(TokenizerGpt2Bpe, AddedTokenOptions) {
  Gpt2BpeTokenizer::Spec spec;
  spec.source = "test";
  const char* vocab[] = {"a", "b", "Ġ", "ab", "<x>"};
  for (int32_t i = 0; i < 5; ++i) spec.vocab[vocab[i]] = i;
  spec.merges = {{"a", "b"}};
  spec.added_tokens = {{.content = "<x>", .id = 4, .lstrip = true, .rstrip = true},
                       {.content = "ab!", .id = 5, .single_word = true}};
  const Gpt2BpeTokenizer tokenizer(std::move(spec));
  // Lstrip and rstrip take the spaces around "<x>" into the token.
  EXPECT_EQ(tokenizer.encode("ab  <x>  a"), (std::vector<int32_t>{3, 4, 0}));
  // single_word: "ab!" after "b" is no match; '!' has no token and, with no unk, is dropped.
  EXPECT_EQ(tokenizer.encode("ab! bab!"), (std::vector<int32_t>{5, 2, 1, 3}));
  // Where HF tokenizers matches a single_word token (asked with add_tokens on the fixture).
  const auto matches = [&](std::string_view text) {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    return std::find(ids.begin(), ids.end(), 5) != ids.end();
  };
  EXPECT_TRUE(matches("-ab!-"));
  EXPECT_FALSE(matches("_ab!"));
  EXPECT_FALSE(matches("1ab!"));
  EXPECT_FALSE(matches("éab!"));
  EXPECT_FALSE(matches("ab!é"));
  EXPECT_FALSE(matches("ab!_"));
  EXPECT_EQ(tokenizer.vocab_size(), 6);
  EXPECT_EQ(tokenizer.eos_token_id(), std::nullopt);
}

// Tokens not normalized are cut before the normalized ones, even where there is no normaliser:
// HF tokenizers gives [a, bc] for "abc" with "ab" normalized and "bc" not.
TEST(TokenizerGpt2Bpe, AddedTokensNotNormalizedMatchFirst) {
  Gpt2BpeTokenizer::Spec spec;
  spec.source = "test";
  spec.vocab = {{"a", 0}, {"b", 1}, {"c", 2}};
  spec.added_tokens = {{.content = "ab", .id = 3, .normalized = true},
                       {.content = "bc", .id = 4, .normalized = false}};
  const Gpt2BpeTokenizer tokenizer(std::move(spec));
  EXPECT_EQ(tokenizer.encode("abc"), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(tokenizer.encode("abcab"), (std::vector<int32_t>{0, 4, 3}));
}

// HF's ids on a tokenizer.json made for the edges (tools/gen_tokenizer_fixtures.py edges): a merge
// pair listed twice keeps its last rank, and single_word added tokens match next to characters
// that are not word characters for Rust's regex \w (², ½, ①) and not next to those that are
// (Ⅷ, ٣, é, a combining accent, ‿, a joiner, ⓐ) (issue 19, defect 18).
TEST(TokenizerGpt2Bpe, EdgeCasesEqualHf) {
  const auto tokenizer =
      Gpt2BpeTokenizer::from_tokenizer_json(tokenizer_fixture("gpt2_bpe_edges/tokenizer.json"));
  const json ref = json::parse(io_test::read_bytes(tokenizer_fixture("edges_reference.json")));
  ASSERT_GT(ref["texts"].size(), 50u);
  for (size_t i = 0; i < ref["texts"].size(); ++i) {
    const std::string text = ref["texts"][i].get<std::string>();
    EXPECT_EQ(tokenizer->encode(text), ref["ids"][i].get<std::vector<int32_t>>())
        << "text " << i << ": \"" << text << "\"";
  }
}

TEST(TokenizerGpt2Bpe, IgnoreMergesAndUnknownBytes) {
  Gpt2BpeTokenizer::Spec spec;
  spec.source = "test";
  const char* vocab[] = {"a", "b", "c", "ab", "abc", "<unk>"};
  for (int32_t i = 0; i < 6; ++i) spec.vocab[vocab[i]] = i;
  spec.merges = {{"a", "b"}};  // no merge reaches "abc"
  Gpt2BpeTokenizer::Spec ignoring = spec;
  ignoring.ignore_merges = true;
  ignoring.unk_token = "<unk>";
  EXPECT_EQ(Gpt2BpeTokenizer(spec).encode("abc"), (std::vector<int32_t>{3, 2}));
  // A whole word in the vocabulary is one token (Llama 3's ignore_merges); a byte without a
  // token is the unk token, or dropped without one, as in HF.
  EXPECT_EQ(Gpt2BpeTokenizer(ignoring).encode("abc"), (std::vector<int32_t>{4}));
  EXPECT_EQ(Gpt2BpeTokenizer(ignoring).encode("abd"), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(Gpt2BpeTokenizer(spec).encode("abd"), (std::vector<int32_t>{3}));
}

TEST(TokenizerGpt2Bpe, CorruptTokenizerJsonNamesFileAndField) {
  const json good =
      parse_json(read_text_file(tokenizer_fixture("gpt2_bpe/tokenizer.json")), "fixture");
  TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  const auto load_with = [&](const json& root) {
    io_test::write_bytes(path, root.dump());
    Gpt2BpeTokenizer::from_tokenizer_json(path);
  };
  const std::string text = good.dump();
  io_test::write_bytes(path, text.substr(0, text.size() / 2));
  expect_error<ValueError>([&] { Gpt2BpeTokenizer::from_tokenizer_json(path); },
                           {path, "invalid JSON"});

  json bad = good;
  bad["model"]["merges"][3] = json::array({"Ġ", "no-such-token"});
  expect_error<ValueError>([&] { load_with(bad); },
                           {path, "merge 3", "\"no-such-token\"", "not in the vocabulary"});
  bad = good;
  bad["model"]["merges"][7] = 12;
  expect_error<ValueError>([&] { load_with(bad); }, {path, "model.merges[7]", "number 12"});
  bad = good;
  bad["model"]["vocab"]["Ġt"] = "x";
  expect_error<ValueError>([&] { load_with(bad); }, {path, "model.vocab[\"Ġt\"]", "string \"x\""});
  bad = good;
  bad["model"]["vocab"]["Ġt"] = 2000000000;
  expect_error<ValueError>([&] { load_with(bad); }, {path, "token id 2000000000", "far beyond"});
  bad = good;
  bad["model"].erase("vocab");
  expect_error<ValueError>([&] { load_with(bad); }, {path, "'vocab' is missing"});
  bad = good;
  bad["added_tokens"][0]["id"] = -4;
  expect_error<ValueError>([&] { load_with(bad); }, {path, "added_tokens[0].id", "-4"});
  bad = good;
  bad["model"]["type"] = "Unigram";
  expect_error<NotImplementedError>([&] { load_with(bad); }, {path, "model.type", "Unigram"});
  bad = good;
  bad["normalizer"] = json{{"type", "NFKC"}};
  expect_error<NotImplementedError>([&] { load_with(bad); }, {path, "normalizer", "NFKC"});
  bad = good;
  bad["pre_tokenizer"] = json{{"type", "Whitespace"}};
  expect_error<NotImplementedError>([&] { load_with(bad); },
                                    {path, "pre_tokenizer.type", "Whitespace"});
  expect_error<ValueError>([&] { Gpt2BpeTokenizer::from_tokenizer_json(dir.file("missing.json")); },
                           {dir.file("missing.json"), "cannot read"});
}

TEST(TokenizerGpt2Bpe, CorruptMergesTxtNamesLine) {
  TempDir dir;
  io_test::write_bytes(dir.file("merges.txt"), "#version: 0.2\nĠ t\nbad\n");
  expect_error<ValueError>(
      [&] {
        Gpt2BpeTokenizer::from_vocab_and_merges(tokenizer_fixture("gpt2_bpe/vocab.json"),
                                                dir.file("merges.txt"));
      },
      {dir.file("merges.txt"), "line 3", "\"bad\""});
}

}  // namespace
}  // namespace headroom
