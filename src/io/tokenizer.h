// Tokenizers: the interface the data pipeline and generation use, the byte-level tokenizer
// (token id = byte value, the default for presets), and the loader that picks one for a model
// directory and the saver that writes one into another.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

// The bytes of a text one token stands for: [start, end).
struct TokenOffsets {
  size_t start = 0;
  size_t end = 0;
};

// A file a tokenizer was read from.
struct TokenizerFile {
  std::string name;  // its name in an HF model directory: tokenizer.json, vocab.json, ...
  std::string path;  // where it was read
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text to token ids, without special tokens (no BOS/EOS added).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Text to token ids with the special tokens a tokenizer.json's post-processor adds around a
  // text (Llama 3's BOS), as HF's encode(text) with add_special_tokens=True; the tokenizers not
  // read from a tokenizer.json add none here (SentencePiece's BOS is not added).
  virtual std::vector<int32_t> encode_with_special_tokens(std::string_view text) const {
    return encode(text);
  }
  // Ids back to text; decode(encode(t)) == t for any valid UTF-8 text.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The id placed between documents when they are packed; nullopt when the tokenizer has none.
  virtual std::optional<int32_t> eos_token_id() const = 0;
  // "byte", "gpt2_bpe" or "sentencepiece".
  virtual std::string kind() const = 0;
  // A digest of the tokenizer's kind and files: token caches are keyed by it.
  virtual std::string fingerprint() const = 0;
  // The files it was read from, in the order its fingerprint hashes them; none for a tokenizer
  // not read from files (the byte-level one).
  virtual std::vector<TokenizerFile> files() const { return {}; }
  // HF's offset mapping of ids = encode(text), in bytes of `text` rather than characters: what
  // each token stands for (a token of part of a character gets the bytes it holds, where HF gives
  // the whole character; a span on character boundaries overlaps the same tokens either way).
  // NotImplementedError where a tokenizer cannot say; ValueError when `ids` are not `text`'s.
  virtual std::vector<TokenOffsets> offsets(std::string_view text,
                                            std::span<const int32_t> ids) const;
};

// Every byte is one token: vocab 256, no end-of-text id.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::optional<int32_t> eos_token_id() const override { return std::nullopt; }
  std::string kind() const override { return "byte"; }
  std::string fingerprint() const override { return "byte"; }
  std::vector<TokenOffsets> offsets(std::string_view text,
                                    std::span<const int32_t> ids) const override;
};

// What one token stands for in a text, for align_token_pieces: its bytes, and whether it takes
// the whitespace before (lstrip) or after (rstrip) it, as an added token with those flags does.
struct TokenPiece {
  std::string text;
  bool lstrip = false;
  bool rstrip = false;
};

// Offsets of tokens whose pieces (in order) make up `text`, as HF's offset mapping: each piece is
// found at the running position; an lstrip / rstrip piece's offsets also cover the whitespace
// before / after it; a piece starting with a space the text lacks there (the "▁" a Metaspace
// pre-tokenizer or Prepend normalizer adds) stands for the rest of it, and alone for the
// character that follows. ValueError naming the token when a piece is not found, or when
// `text` goes on after the last.
std::vector<TokenOffsets> align_token_pieces(std::string_view text,
                                             std::span<const TokenPiece> pieces,
                                             std::span<const int32_t> ids);

// The tokenizer of a model directory, the first found of: tokenizer.json, vocab.json +
// merges.txt (GPT-2 byte-level BPE), tokenizer.model (SentencePiece); with none of them the
// byte-level tokenizer. A corrupt or unsupported file is an error naming it.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir);

// The tokenizer files of a model directory, in the order load_tokenizer looks for them.
inline constexpr const char* kTokenizerFileNames[] = {"tokenizer.json", "vocab.json", "merges.txt",
                                                      "tokenizer.model"};

// HF's tokenizer.save_pretrained for the files headroom reads, so that load_tokenizer(dir) gives
// `tokenizer` back: writes into `dir`, each atomically, the files it was read from (their bytes
// checked against its fingerprint: a file changed since it was loaded is a ValueError naming
// it, and `dir` is left as it was) and the tokenizer_config.json and special_tokens_map.json
// found beside them; removes from `dir` the files load_tokenizer would read first, which belong
// to another tokenizer (all of kTokenizerFileNames for one without files, the byte-level one).
void save_tokenizer(const Tokenizer& tokenizer, const std::string& dir);

// FNV-1a 64 over the kind and each file's length and bytes, as 16 hex digits.
std::string tokenizer_fingerprint(std::string_view kind,
                                  std::initializer_list<std::string_view> file_bytes);
std::string tokenizer_fingerprint(std::string_view kind,
                                  std::span<const std::string_view> file_bytes);

}  // namespace headroom
