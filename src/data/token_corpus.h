// A corpus tokenised once: every document of a text source encoded and joined into one token
// stream, kept in a cache file that later runs memory-map instead of tokenising again.
//
// Note [Token cache file]
// <cache_dir>/tokens-<key>.bin, little-endian:
//   bytes  0..7   magic "HRTOKEN\0"
//   bytes  8..11  u32 format version (2; 1 had no special tokens in documents)
//   bytes 12..15  u32 bytes per token: 2 when vocab_size <= 65536, else 4
//   bytes 16..23  u64 token count
//   bytes 24..31  u64 key (also in the file name, as 16 hex digits)
//   bytes 32..39  u64 vocab_size
//   bytes 40..47  u64 checksum of the token bytes
//   bytes 48..    the tokens
// The key hashes the format version, the tokenizer's kind, fingerprint, vocab_size and eos id,
// and each source file's absolute path, format, size and modification time: editing, adding or
// removing a file, or changing the tokenizer, gives a new key. A file whose magic, version, key,
// vocab, length or checksum is not what this run expects is never used; the corpus is tokenised
// again and the file replaced (atomically, see core/atomic_file.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/text_source.h"
#include "io/tokenizer.h"

namespace headroom {

struct TokenizeOptions {
  // Where tokens-<key>.bin lives (created when missing). Empty: no cache file, the tokens stay in
  // memory.
  std::string cache_dir = "";
  // Threads that encode documents of a large corpus at once (0: one per core). The result does not
  // depend on it. The tokenizer's encode must be safe to call from several threads.
  int64_t num_threads = 0;
  // The run's output directory: left out when it lies inside a data directory (see
  // list_text_files).
  std::string output_dir = "";
};

// The token stream of a corpus: documents in order, each encoded as HF's tokenizer(text) encodes
// it (the post-processor's special tokens included: Llama 3's and Llama 2's BOS begin each
// document, as run_clm's tokenize_function gives them), the tokenizer's eos id between
// consecutive non-empty documents when it has one (none after the last; empty documents add
// nothing).
class TokenCorpus {
 public:
  ~TokenCorpus();
  TokenCorpus(const TokenCorpus&) = delete;
  TokenCorpus& operator=(const TokenCorpus&) = delete;

  int64_t size() const { return count_; }
  int token_bytes() const { return token_bytes_; }  // 2 or 4, as in the cache file
  // Every token lies in [0, the tokenizer's vocab_size): checked as it was encoded, and a cache
  // file is only read when its checksum matches the tokens so written.
  int64_t at(int64_t index) const;
  // Tokens [start, start + count) widened to i64; the range must lie inside the stream.
  void copy_to(int64_t start, int64_t count, int64_t* out) const;

  // The data path it was made from (errors name it).
  const std::string& source() const { return source_; }
  // The cache file, or empty without a cache directory.
  const std::string& cache_path() const { return cache_path_; }
  // True when the tokens were read from an existing cache file rather than tokenised now.
  bool loaded_from_cache() const { return loaded_from_cache_; }
  // Why an existing cache file was not used (empty when there was none, or it was used).
  const std::string& cache_rejected_reason() const { return cache_rejected_reason_; }
  // What the walk of a data directory left out (see list_text_files), for the user's note.
  const std::vector<SkippedPath>& skipped() const { return skipped_; }

 private:
  friend std::shared_ptr<const TokenCorpus> load_token_corpus(const std::string&, const Tokenizer&,
                                                              const TokenizeOptions&);
  TokenCorpus() = default;

  std::string source_;
  std::string cache_path_;
  bool loaded_from_cache_ = false;
  std::string cache_rejected_reason_;
  std::vector<SkippedPath> skipped_;
  int token_bytes_ = 2;
  int64_t count_ = 0;
  const unsigned char* tokens_ = nullptr;  // into owned_ or mapping_
  std::string owned_;                      // the whole file image when there is no mapping
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
};

// The tokens of `data_path` (see text_source.h for what it may be): read from the cache file when
// one with this run's key is valid, otherwise tokenised (and cached when options.cache_dir is set).
std::shared_ptr<const TokenCorpus> load_token_corpus(const std::string& data_path,
                                                     const Tokenizer& tokenizer,
                                                     const TokenizeOptions& options = {});

}  // namespace headroom
