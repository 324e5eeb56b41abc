// The SentencePiece-style tokenizer.json files of Llama 2, Mistral, Gemma and Phi-3 against HF
// tokenizers: ids with and without the post-processor's special tokens, decodings, variants of
// Metaspace, the post-processor and the decoder, and the refusal of what headroom does not
// implement (tests/fixtures/tokenizer/sentencepiece_json_reference.json,
// tools/gen_tokenizer_sentencepiece_json_fixtures.py).
#include <gtest/gtest.h>

#include "io/gpt2_bpe_tokenizer.h"
#include "io/io_test_helpers.h"
#include "io/tokenizer_reference.h"

namespace headroom {
namespace {

using io_test::TempDir;
using io_test::tokenizer_fixture;
using json = nlohmann::json;

const json& sp_reference() {
  return io_test::tokenizer_reference_file("sentencepiece_json_reference.json");
}

void expect_family_equals_hf(const std::string& family) {
  const auto tokenizer = load_tokenizer(tokenizer_fixture(family));
  ASSERT_EQ(sp_reference()[family]["ids"].size(), sp_reference()["texts"].size());
  io_test::expect_tokenizer_matches_reference(*tokenizer, sp_reference()[family],
                                              sp_reference()["texts"], family);
}

TEST(TokenizerSentencePieceJson, Llama2IdsEqualHf) { expect_family_equals_hf("llama2"); }

TEST(TokenizerSentencePieceJson, MistralIdsEqualHf) { expect_family_equals_hf("mistral"); }

TEST(TokenizerSentencePieceJson, GemmaIdsEqualHf) { expect_family_equals_hf("gemma"); }

TEST(TokenizerSentencePieceJson, Phi3IdsEqualHf) { expect_family_equals_hf("phi3"); }

// Each variant is its family's file with the reference's top-level fields replaced: Metaspace's
// prepend schemes with and without split, a post-processor adding EOS, no decoder, no
// pre-tokenizer.
TEST(TokenizerSentencePieceJson, VariantsEqualHf) {
  const json& variants = sp_reference()["variants"];
  ASSERT_GE(variants.size(), 8u);
  for (const auto& [name, variant] : variants.items()) {
    const std::string family = name.substr(0, name.find('_'));
    json root = parse_json(read_text_file(tokenizer_fixture(family + "/tokenizer.json")), family);
    for (const auto& [field, value] : variant["tokenizer_json"].items()) root[field] = value;
    TempDir dir;
    io_test::write_bytes(dir.file("tokenizer.json"), root.dump());
    const auto tokenizer = Gpt2BpeTokenizer::from_tokenizer_json(dir.file("tokenizer.json"));
    io_test::expect_tokenizer_matches_reference(*tokenizer, variant, sp_reference()["texts"], name);
  }
}

TEST(TokenizerSentencePieceJson, ByteFallbackAndEosFromTokenizerConfig) {
  const auto gemma = load_tokenizer(tokenizer_fixture("gemma"));
  const auto& bpe = dynamic_cast<const Gpt2BpeTokenizer&>(*gemma);
  EXPECT_EQ(gemma->eos_token_id(), bpe.token_to_id("<eos>"));
  // "中" is not in the vocabulary: its three UTF-8 bytes are <0xE4> <0xB8> <0xAD>.
  const std::vector<int32_t> ids = gemma->encode("\xE4\xB8\xAD");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], bpe.token_to_id("<0xE4>"));
  EXPECT_EQ(gemma->decode(ids), "\xE4\xB8\xAD");
  // Bytes that are not UTF-8 decode to one U+FFFD each, as HF's ByteFallback.
  const std::vector<int32_t> cut = {ids[0], ids[1]};
  EXPECT_EQ(gemma->decode(cut), "\xEF\xBF\xBD\xEF\xBF\xBD");
  const auto phi3 = load_tokenizer(tokenizer_fixture("phi3"));
  EXPECT_EQ(phi3->eos_token_id(),
            dynamic_cast<const Gpt2BpeTokenizer&>(*phi3).token_to_id("<|endoftext|>"));
}

// Each edit (a JSON pointer into Llama 2's file and its new value) is refused with the file, the
// field and the value in the message: NotImplementedError for what headroom does not implement,
// ValueError for a malformed value.
TEST(TokenizerSentencePieceJson, UnsupportedFieldsAreRefusedByName) {
  const io_test::EditedTokenizerJson edited("llama2");
  struct Edit {
    const char* pointer;
    json value;
    std::vector<std::string> pieces;
    bool malformed = false;  // ValueError, not NotImplementedError
  };
  const auto metaspace_with = [](const char* key, json value) {
    json metaspace = {{"type", "Metaspace"}, {"replacement", "▁"}};
    metaspace[key] = std::move(value);
    return metaspace;
  };
  const std::vector<Edit> edits = {
      {"/normalizer/normalizers/1/pattern",
       json{{"Regex", " +"}},
       {"normalizer.normalizers[1].pattern", "Regex"}},
      {"/normalizer/normalizers/0/type",
       "Lowercase",
       {"normalizer.normalizers[0].type", "Lowercase"}},
      {"/decoder/decoders/2/type", "WordPiece", {"decoder.decoders[2].type", "WordPiece"}},
      {"/decoder", json{{"type", "ByteLevel"}}, {"decoder.type", "ByteLevel"}},
      {"/model/dropout", 0.1, {"model.dropout", "0.1"}},
      {"/pre_tokenizer", json{{"type", "Whitespace"}}, {"pre_tokenizer", "Whitespace"}},
      {"/pre_tokenizer",
       json{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}},
       {"pre_tokenizer.behavior", "Isolated"}},
      {"/pre_tokenizer",
       metaspace_with("prepend_scheme", "sometimes"),
       {"pre_tokenizer.prepend_scheme", "sometimes"},
       true},
      {"/pre_tokenizer",
       metaspace_with("replacement", "ab"),
       {"pre_tokenizer.replacement", "ab"},
       true},
      {"/pre_tokenizer",
       metaspace_with("add_prefix_space", false),
       {"pre_tokenizer.add_prefix_space"},
       true},
  };
  for (const Edit& edit : edits) {
    json bad = edited.good;
    bad[json::json_pointer(edit.pointer)] = edit.value;
    try {
      edited.load(bad);
      ADD_FAILURE() << edit.pointer << ": accepted";
    } catch (const std::exception& e) {
      const bool malformed = dynamic_cast<const ValueError*>(&e) != nullptr;
      const bool unsupported = dynamic_cast<const NotImplementedError*>(&e) != nullptr;
      EXPECT_TRUE(edit.malformed ? malformed : unsupported) << edit.pointer << ": " << e.what();
      const std::string message = e.what();
      EXPECT_NE(message.find(edited.path), std::string::npos) << message;
      for (const std::string& piece : edit.pieces) {
        EXPECT_NE(message.find(piece), std::string::npos) << piece << " in " << message;
      }
    }
  }
}

}  // namespace
}  // namespace headroom
