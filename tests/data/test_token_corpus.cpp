// The token stream of a corpus and its cache file: eos joining, reuse without tokenising,
// rebuilding a truncated, altered or foreign file, 2- and 4-byte tokens, threads.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/data_test_helpers.h"
#include "data/token_corpus.h"
#include "io/tokenizer.h"

namespace headroom {
namespace {

using data_test::all_tokens;
using data_test::CountingTokenizer;
using data_test::expect_error;
using data_test::read_bytes;
using data_test::TempDir;
using data_test::write_bytes;

std::vector<int64_t> bytes_of(std::string_view text) {
  return std::vector<int64_t>(text.begin(), text.end());
}

TEST(TokenCorpus, JoinsDocumentsWithEosBetweenThem) {
  TempDir dir;
  write_bytes(dir.file("d.jsonl"),
              "{\"text\": \"ab\"}\n{\"text\": \"\"}\n{\"text\": \"c\"}\n{\"text\": \"de\"}\n");
  CountingTokenizer tokenizer;
  const auto corpus = load_token_corpus(dir.file("d.jsonl"), tokenizer);
  // The empty document adds nothing, not even a second eos; none after the last document.
  EXPECT_EQ(all_tokens(*corpus), (std::vector<int64_t>{'a', 'b', 256, 'c', 256, 'd', 'e'}));
  EXPECT_EQ(corpus->token_bytes(), 2);
  EXPECT_EQ(corpus->cache_path(), "");
  EXPECT_FALSE(corpus->loaded_from_cache());
}

// run_clm's tokenize_function calls tokenizer(text): Llama 3's post-processor puts its BOS in
// front of every document, and so does the corpus, before the eos that joins them.
TEST(TokenCorpus, DocumentsCarryTheSpecialTokensTheTokenizerAdds) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("docs"));
  write_bytes(dir.file("docs/1.txt"), "Hello world");
  write_bytes(dir.file("docs/2.txt"), "");
  write_bytes(dir.file("docs/3.txt"), "Bye");
  const auto tokenizer = load_tokenizer(std::string(HEADROOM_FIXTURES_DIR) + "/tokenizer/llama3");
  const auto corpus = load_token_corpus(dir.file("docs"), *tokenizer);
  std::vector<int64_t> expected;
  for (const char* text : {"Hello world", "Bye"}) {
    if (!expected.empty()) expected.push_back(*tokenizer->eos_token_id());
    for (const int32_t id : tokenizer->encode_with_special_tokens(text)) expected.push_back(id);
  }
  ASSERT_GT(expected.size(), 3u);
  // The fixture's post-processor adds a BOS that encode (no special tokens) does not.
  EXPECT_NE(expected.front(), tokenizer->encode("Hello world").front());
  EXPECT_EQ(all_tokens(*corpus), expected);
}

TEST(TokenCorpus, WithoutEosDocumentsAreConcatenated) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("docs"));
  write_bytes(dir.file("docs/1.txt"), "xy");
  write_bytes(dir.file("docs/2.txt"), "z");
  const auto corpus = load_token_corpus(dir.file("docs"), ByteTokenizer());
  EXPECT_EQ(all_tokens(*corpus), bytes_of("xyz"));
  EXPECT_EQ(corpus->at(2), 'z');
  EXPECT_THROW(corpus->at(3), IndexError);
}

TEST(TokenCorpus, EmptyCorpusIsAnError) {
  TempDir dir;
  write_bytes(dir.file("empty.txt"), "");
  expect_error<ValueError>([&] { load_token_corpus(dir.file("empty.txt"), ByteTokenizer()); },
                           {dir.file("empty.txt"), "has no tokens"});
}

TEST(TokenCorpus, SecondLoadReadsTheCacheWithoutTokenizing) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("data"));
  write_bytes(dir.file("data/a.txt"), "hello");
  write_bytes(dir.file("data/b.jsonl"), "{\"text\": \"big\"}\n{\"text\": \"world\"}\n");
  const TokenizeOptions options{.cache_dir = dir.file("cache/tokens"), .num_threads = 1};

  CountingTokenizer first;
  const auto built = load_token_corpus(dir.file("data"), first, options);
  EXPECT_EQ(first.calls, 3);
  EXPECT_FALSE(built->loaded_from_cache());
  EXPECT_EQ(built->cache_rejected_reason(), "");
  const std::string name = std::filesystem::path(built->cache_path()).filename().string();
  EXPECT_EQ(name.substr(0, 7), "tokens-");
  EXPECT_EQ(name.size(), 7u + 16u + 4u);
  ASSERT_TRUE(std::filesystem::exists(built->cache_path()));
  EXPECT_EQ(std::filesystem::file_size(built->cache_path()), 48u + 2u * 15u);

  CountingTokenizer second;
  const auto cached = load_token_corpus(dir.file("data"), second, options);
  EXPECT_EQ(second.calls, 0);
  EXPECT_TRUE(cached->loaded_from_cache());
  EXPECT_EQ(cached->cache_path(), built->cache_path());
  EXPECT_EQ(all_tokens(*cached), all_tokens(*built));
  std::vector<int64_t> expected = bytes_of("hello");
  expected.push_back(256);
  for (int64_t t : bytes_of("big")) expected.push_back(t);
  expected.push_back(256);
  for (int64_t t : bytes_of("world")) expected.push_back(t);
  EXPECT_EQ(all_tokens(*cached), expected);
}

TEST(TokenCorpus, ChangedSourceOrTokenizerGetsANewCacheFile) {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "hello");
  const TokenizeOptions options{.cache_dir = dir.file("cache")};
  CountingTokenizer tokenizer;
  const std::string first = load_token_corpus(dir.file("a.txt"), tokenizer, options)->cache_path();

  CountingTokenizer other_files(0, "other");  // another fingerprint
  const auto other = load_token_corpus(dir.file("a.txt"), other_files, options);
  EXPECT_NE(other->cache_path(), first);
  EXPECT_EQ(other_files.calls, 1);

  write_bytes(dir.file("a.txt"), "hello, edited");
  CountingTokenizer again;
  const auto edited = load_token_corpus(dir.file("a.txt"), again, options);
  EXPECT_NE(edited->cache_path(), first);
  EXPECT_EQ(again.calls, 1);
  EXPECT_EQ(all_tokens(*edited), bytes_of("hello, edited"));
}

TEST(TokenCorpus, TruncatedAlteredOrForeignCacheIsRebuilt) {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "some text to cache");
  const TokenizeOptions options{.cache_dir = dir.file("cache")};
  CountingTokenizer tokenizer;
  const auto built = load_token_corpus(dir.file("a.txt"), tokenizer, options);
  const std::string path = built->cache_path();
  const std::string good = read_bytes(path);
  const std::vector<int64_t> tokens = all_tokens(*built);

  std::string altered = good;
  altered[48 + 4] ^= 1;  // one token byte: the checksum catches it
  std::string lying = good;
  lying[16] += 1;  // the header claims one token more than the file holds
  std::string other_key = good;
  other_key[24] ^= 1;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {good.substr(0, good.size() - 1), "truncated"},
      {good.substr(0, 20), "shorter than its header"},
      {"", "empty"},
      {altered, "checksum"},
      {lying, "truncated or extended"},
      {other_key, "key"},
      {std::string(200, 'x'), "not a headroom token file"},
  };
  for (const auto& [bytes, reason] : cases) {
    SCOPED_TRACE(reason);
    write_bytes(path, bytes);
    CountingTokenizer again;
    const auto rebuilt = load_token_corpus(dir.file("a.txt"), again, options);
    EXPECT_EQ(again.calls, 1);
    EXPECT_FALSE(rebuilt->loaded_from_cache());
    EXPECT_NE(rebuilt->cache_rejected_reason().find(reason), std::string::npos)
        << rebuilt->cache_rejected_reason();
    EXPECT_EQ(all_tokens(*rebuilt), tokens);
    EXPECT_EQ(read_bytes(path), good);  // replaced by a good file
  }
}

TEST(TokenCorpus, LargeVocabularyStoresFourByteTokens) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("data"));
  write_bytes(dir.file("data/a.txt"), "ab");
  write_bytes(dir.file("data/b.txt"), "c");
  const TokenizeOptions options{.cache_dir = dir.file("cache")};
  CountingTokenizer tokenizer(65536);
  const auto built = load_token_corpus(dir.file("data"), tokenizer, options);
  EXPECT_EQ(built->token_bytes(), 4);
  EXPECT_EQ(std::filesystem::file_size(built->cache_path()), 48u + 4u * 4u);
  CountingTokenizer again(65536);
  const auto cached = load_token_corpus(dir.file("data"), again, options);
  EXPECT_TRUE(cached->loaded_from_cache());
  EXPECT_EQ(all_tokens(*cached),
            (std::vector<int64_t>{65536 + 'a', 65536 + 'b', 65536 + 256, 65536 + 'c'}));
}

TEST(TokenCorpus, ThreadCountDoesNotChangeTheTokens) {
  TempDir dir;
  // 4000 documents, 2 MB of text: past the size at which documents are encoded on threads.
  std::string jsonl;
  for (int i = 0; i < 4000; ++i) {
    std::string text(static_cast<size_t>(100 + (i * 37) % 900), static_cast<char>('a' + i % 26));
    if (i % 500 == 0) text.clear();
    jsonl += str_cat("{\"text\": \"", text, i, "\"}\n");
  }
  write_bytes(dir.file("big.jsonl"), jsonl);
  CountingTokenizer serial_tokenizer, threaded_tokenizer;
  const auto serial =
      load_token_corpus(dir.file("big.jsonl"), serial_tokenizer, {.num_threads = 1});
  const auto threaded =
      load_token_corpus(dir.file("big.jsonl"), threaded_tokenizer, {.num_threads = 4});
  EXPECT_EQ(threaded_tokenizer.calls, 4000);
  EXPECT_GT(serial->size(), 1'500'000);
  EXPECT_EQ(all_tokens(*threaded), all_tokens(*serial));
}

TEST(TokenCorpus, TokenIdOutsideTheVocabularyIsAnError) {
  class BadTokenizer final : public Tokenizer {
   public:
    std::vector<int32_t> encode(std::string_view) const override { return {5, 300}; }
    std::string decode(std::span<const int32_t>) const override { return ""; }
    int64_t vocab_size() const override { return 256; }
    std::optional<int32_t> eos_token_id() const override { return std::nullopt; }
    std::string kind() const override { return "bad"; }
    std::string fingerprint() const override { return "bad"; }
  };
  TempDir dir;
  write_bytes(dir.file("a.txt"), "x");
  expect_error<ValueError>([&] { load_token_corpus(dir.file("a.txt"), BadTokenizer()); },
                           {dir.file("a.txt"), "token id 300", "vocab_size 256"});
}

}  // namespace
}  // namespace headroom
