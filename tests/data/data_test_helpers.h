// Helpers shared by the data/ tests: a byte-level tokenizer with an end-of-text id that counts
// its encode calls (to see whether a corpus was tokenised or read from the cache), and corpora
// whose tokens are known.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "data/token_corpus.h"
#include "io/io_test_helpers.h"
#include "io/tokenizer.h"

namespace headroom::data_test {

using io_test::expect_error;
using io_test::read_bytes;
using io_test::TempDir;
using io_test::write_bytes;

// Token = byte + offset; eos = 256 + offset (vocab 257 + offset). An offset of 65536 puts every
// id above 16 bits.
class CountingTokenizer final : public Tokenizer {
 public:
  explicit CountingTokenizer(int32_t offset = 0, std::string name = "counting")
      : offset_(offset), name_(std::move(name)) {}

  std::vector<int32_t> encode(std::string_view text) const override {
    ++calls;
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]) + offset_;
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids) text.push_back(static_cast<char>(id - offset_));
    return text;
  }
  int64_t vocab_size() const override { return 257 + offset_; }
  std::optional<int32_t> eos_token_id() const override { return 256 + offset_; }
  std::string kind() const override { return "counting"; }
  std::string fingerprint() const override { return str_cat(name_, "+", offset_); }

  mutable std::atomic<int64_t> calls{0};

 private:
  int32_t offset_;
  std::string name_;
};

// Each token 0..255 as two letters 'a' + high nibble, 'a' + low nibble: any token sequence as
// plain ASCII text (data files must be UTF-8 text). Vocab 256, no end-of-text id.
class HexPairTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size() / 2);
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = (text[2 * i] - 'a') * 16 + (text[2 * i + 1] - 'a');
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids)
      text += {static_cast<char>('a' + id / 16), static_cast<char>('a' + id % 16)};
    return text;
  }
  int64_t vocab_size() const override { return 256; }
  std::optional<int32_t> eos_token_id() const override { return std::nullopt; }
  std::string kind() const override { return "hex-pair"; }
  std::string fingerprint() const override { return "hex-pair"; }
};

// A corpus of n tokens whose token i is i % 256, from a text file.
inline std::shared_ptr<const TokenCorpus> counting_corpus(const TempDir& dir, int64_t n) {
  const HexPairTokenizer tokenizer;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i % 256);
  const std::string path = dir.file(str_cat("counting_", n, ".txt"));
  write_bytes(path, tokenizer.decode(ids));
  return load_token_corpus(path, tokenizer);
}

inline std::vector<int64_t> all_tokens(const TokenCorpus& corpus) {
  std::vector<int64_t> tokens(static_cast<size_t>(corpus.size()));
  corpus.copy_to(0, corpus.size(), tokens.data());
  return tokens;
}

}  // namespace headroom::data_test
