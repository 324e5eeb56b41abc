// SentencePiece (Llama's configuration) against the sentencepiece Python library's ids and
// decodings, and the errors of a corrupt model.
#include <gtest/gtest.h>

#include "io/io_test_helpers.h"
#include "io/sentencepiece_tokenizer.h"
#include "io/tokenizer_reference.h"

namespace headroom {
namespace {

using io_test::expect_error;
using io_test::tokenizer_fixture;
using io_test::tokenizer_reference;

TEST(TokenizerSentencePiece, IdsAndDecodingsEqualTheLibrary) {
  const SentencePieceTokenizer tokenizer(tokenizer_fixture("sentencepiece/tokenizer.model"));
  const auto& ref = tokenizer_reference();
  for (size_t i = 0; i < ref["texts"].size(); ++i) {
    const std::string text = ref["texts"][i].get<std::string>();
    const auto expected = ref["sentencepiece"]["ids"][i].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tokenizer.encode(text);
    EXPECT_EQ(ids, expected) << "text " << i << ": \"" << text << "\"";
    // The identity normaliser and byte fallback of this model make decoding exact; a model with
    // NFKC or whitespace folding gives the library's normalised text instead.
    EXPECT_EQ(tokenizer.decode(ids), ref["sentencepiece"]["decoded"][i].get<std::string>())
        << "text " << i;
    EXPECT_EQ(tokenizer.decode(ids), text) << "text " << i;
  }
}

TEST(TokenizerSentencePiece, VocabEosAndDummyPrefix) {
  const SentencePieceTokenizer tokenizer(tokenizer_fixture("sentencepiece/tokenizer.model"));
  const auto& ref = tokenizer_reference()["sentencepiece"];
  EXPECT_EQ(tokenizer.vocab_size(), ref["vocab_size"].get<int64_t>());
  EXPECT_EQ(tokenizer.eos_token_id(), ref["eos_token_id"].get<int32_t>());
  EXPECT_EQ(tokenizer.kind(), "sentencepiece");
  // No BOS (1) or EOS (2) added; "Hello" and " Hello" differ only by the dummy prefix's space.
  const std::vector<int32_t> hello = tokenizer.encode("Hello");
  ASSERT_FALSE(hello.empty());
  EXPECT_NE(hello.front(), 1);
  EXPECT_NE(hello.back(), 2);
  EXPECT_EQ(tokenizer.decode(hello), "Hello");
  EXPECT_EQ(tokenizer.encode(""), std::vector<int32_t>{});
  expect_error<ValueError>([&] { tokenizer.decode(std::vector<int32_t>{1000}); },
                           {"tokenizer.model", "token id 1000", "size 1000"});
}

TEST(TokenizerSentencePiece, CorruptModelNamesTheFile) {
  io_test::TempDir dir;
  const std::string path = dir.file("tokenizer.model");
  io_test::write_bytes(path, "this is not a protobuf \xff\xff\xff");
  expect_error<ValueError>([&] { SentencePieceTokenizer tokenizer(path); },
                           {path, "not a valid SentencePiece model"});
  const std::string model = io_test::read_bytes(tokenizer_fixture("sentencepiece/tokenizer.model"));
  io_test::write_bytes(path, model.substr(0, model.size() / 2));
  expect_error<ValueError>([&] { SentencePieceTokenizer tokenizer(path); },
                           {path, "not a valid SentencePiece model"});
  // Appended fields turn it into a unigram model with a piece "\0b": the library's trie builder
  // (darts) throws its own exception for the empty C string (issue 19, defect 11).
  io_test::write_bytes(path,
                       model + std::string("\x12\x02\x18\x01\x0a\x06\x0a\x02\x00\x62\x18\x01", 12));
  expect_error<ValueError>([&] { SentencePieceTokenizer tokenizer(path); },
                           {path, "not a valid SentencePiece model", "zero-length key"});
  // A normalisation trie whose offsets point outside it: the library would read past its buffer
  // while encoding.
  io_test::write_bytes(path,
                       model + std::string("\x1a\x0a\x12\x08\x04\x00\x00\x00\xff\xff\xff\xff", 12));
  expect_error<ValueError>([&] { SentencePieceTokenizer tokenizer(path); },
                           {path, "not a valid SentencePiece model", "normalization rules"});
}

}  // namespace
}  // namespace headroom
