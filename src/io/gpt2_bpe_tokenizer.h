// BPE read from HF tokenizers' tokenizer.json or from GPT-2's original vocab.json + merges.txt,
// encoding exactly as HF tokenizers does: byte-level (see Note [GPT-2 byte-level BPE]) with
// GPT-2's pre-tokenizer or Llama 3's and Qwen2's (a regex Split, then ByteLevel without its regex,
// with Qwen2's NFC normaliser); and the SentencePiece-style files of Llama 2, Mistral, Gemma and
// Phi-3 (see Note [SentencePiece-style BPE]: "▁" for the space, byte fallback).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/tokenizer.h"

namespace headroom {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // HF tokenizers' tokenizer.json with model.type "BPE" and the ByteLevel pre-tokenizer, alone
  // or after Llama 3's or Qwen2's Split; or SentencePiece-style: the Prepend / Replace
  // normalizers, the Metaspace pre-tokenizer or none, byte_fallback, and the decoders Replace,
  // ByteFallback, Fuse, Strip and Metaspace. ValueError names the file and field of a malformed
  // file; NotImplementedError the field and value of a normalizer, pre-tokenizer, decoder,
  // post-processor or BPE option this class does not have.
  static std::unique_ptr<Gpt2BpeTokenizer> from_tokenizer_json(const std::string& path);
  // GPT-2's files; "<|endoftext|>", when in the vocabulary, is a special token as in
  // transformers' GPT2TokenizerFast.
  static std::unique_ptr<Gpt2BpeTokenizer> from_vocab_and_merges(const std::string& vocab_path,
                                                                 const std::string& merges_path);

  std::vector<int32_t> encode(std::string_view text) const override;
  // encode with the post-processor's special tokens around the ids (its TemplateProcessing's
  // single template: Llama 3's <|begin_of_text|> first), as HF's encode(text).
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const override;
  // As HF's decode(ids, skip_special_tokens=False): the file's decoder. Byte-level: invalid
  // UTF-8 in the joined bytes (a token sequence cut inside a character) becomes U+FFFD as in HF's
  // ByteLevel decoder. An id outside the vocabulary is a ValueError.
  std::string decode(std::span<const int32_t> ids) const override;
  // Each token's piece of the text: its bytes (byte-level), or its string with the space
  // marker turned back into a space and <0xNN> into its byte (SentencePiece-style), aligned by
  // align_token_pieces. A text the normaliser changes (Qwen's NFC on text that is not NFC) is
  // a ValueError.
  std::vector<TokenOffsets> offsets(std::string_view text,
                                    std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(token_bytes_.size()); }
  // tokenizer_config.json's eos_token beside a tokenizer.json, else <|endoftext|> when a token.
  std::optional<int32_t> eos_token_id() const override { return eos_token_id_; }
  std::string kind() const override { return "gpt2_bpe"; }
  std::string fingerprint() const override { return fingerprint_; }
  std::vector<TokenizerFile> files() const override { return files_; }

  // The id of a token as the vocabulary spells it (byte-level form, e.g. "Ġthe", or "▁the" in a
  // SentencePiece-style file), or of an added token by its content.
  std::optional<int32_t> token_to_id(std::string_view token) const;

  // One piece of the pre-tokenizer: the end of GPT-2's regex match that starts at `pos`.
  static size_t pretoken_end(std::string_view text, size_t pos);

  // The Split pre-tokenizers headroom implements, by the regex of the family that ships it.
  enum class SplitRegex { none, llama3, qwen2 };
  // One piece of a Split pre-tokenizer: the end of its regex match that starts at `pos`.
  static size_t split_pretoken_end(SplitRegex regex, std::string_view text, size_t pos);

  // What a tokenizer is made of; the factories fill it from the files.
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool single_word = false, lstrip = false, rstrip = false;
    bool normalized = false;  // matched in the normalised text, after those that are not
  };
  // SentencePiece-style pieces (see Note [SentencePiece-style BPE]). Normalizers, in order:
  struct NormalizerStep {
    enum class Kind { nfc, prepend, replace } kind;
    std::string text, replacement;  // prepend: text; replace: every `text` by `replacement`
  };
  // The Metaspace pre-tokenizer: spaces become `replacement`, which is prepended per the scheme
  // and, with split, starts each piece.
  enum class PrependScheme { always, first, never };
  struct Metaspace {
    std::string replacement;
    PrependScheme prepend_scheme = PrependScheme::always;
    bool split = true;
  };
  // The decoders, in order, on the list of token strings.
  struct DecoderStep {
    enum class Kind { replace, byte_fallback, fuse, strip, metaspace } kind = Kind::fuse;
    std::string text = {};         // replace: what is replaced; strip: the character;
                                   // metaspace: the replacement character
    std::string replacement = {};  // replace: what it becomes
    size_t start = 0, stop = 0;    // strip: at most this many characters at each end
    bool strip_first = false;      // metaspace: drop the replacement in the first token
  };

  struct Spec {
    std::string source;                // the file(s), for error messages
    std::vector<TokenizerFile> files;  // the files read, in the fingerprint's order
    std::unordered_map<std::string, int32_t> vocab;
    std::vector<std::pair<std::string, std::string>> merges;  // by rank
    std::vector<AddedToken> added_tokens;
    std::optional<std::string> unk_token;
    bool add_prefix_space = false;
    bool use_regex = true;
    bool ignore_merges = false;
    SplitRegex split_regex = SplitRegex::none;  // a Split before ByteLevel
    bool byte_level = true;                     // false: SentencePiece-style
    std::vector<NormalizerStep> normalizers;
    std::optional<Metaspace> metaspace;      // the pre-tokenizer, when Metaspace
    std::optional<std::string> split_after;  // Split on a string, MergedWithPrevious
    bool byte_fallback = false, fuse_unk = false;
    std::optional<std::vector<DecoderStep>> decoders;  // SentencePiece-style; none: join by " "
    std::vector<int32_t> prefix_ids, suffix_ids;       // the post-processor's special tokens
    std::optional<std::string> eos_token;              // tokenizer_config.json's eos_token
    std::string fingerprint;
  };
  explicit Gpt2BpeTokenizer(Spec spec);
  ~Gpt2BpeTokenizer() override;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct Segment;

  // Cuts out the added tokens of one pass: those not normalized from the raw text, or the
  // normalized ones from the normalised text.
  std::vector<Segment> split_on_added_tokens(std::string_view text, bool normalized_pass) const;
  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;
  std::string normalize(std::string_view text) const;
  // `at_start`: the segment begins the text (Metaspace's prepend_scheme "first").
  void encode_segment(std::string_view segment, bool at_start, std::vector<int32_t>& ids) const;
  void encode_metaspace(std::string_view segment, bool at_start, std::vector<int32_t>& ids) const;
  // SentencePiece-style: a word's first symbols, one per character or its <0xNN> bytes.
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  std::string decode_pieces(std::vector<std::string> tokens) const;
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;
  void bpe(std::string_view word, std::vector<int32_t>& ids) const;

  class WordCache;
  static constexpr size_t kCacheShards = 16;
  // Pre-tokens already merged (see WordCache), sharded so that data loader workers rarely wait.
  std::array<std::unique_ptr<WordCache>, kCacheShards> cache_;

  std::unordered_map<std::string, int32_t> vocab_;  // byte-level token -> id
  std::unordered_map<uint64_t, Merge> merges_;      // (left id, right id) -> merge
  std::array<int32_t, 256> byte_ids_{};             // a byte's one-character token, or -1
  std::optional<int32_t> unk_id_;
  std::vector<AddedToken> added_tokens_;
  std::vector<std::string> added_patterns_;  // content, normalised when the token is normalized
  std::array<std::vector<size_t>, 256> added_by_first_byte_;  // longest first
  std::string added_first_bytes_;                             // each distinct first byte once
  std::array<bool, 2> has_added_in_pass_{};  // by normalized: a pass with none is skipped
  std::vector<std::string> token_bytes_;     // id -> the bytes it decodes to
  std::vector<bool> has_token_;
  std::optional<int32_t> eos_token_id_;
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  bool ignore_merges_ = false;
  SplitRegex split_regex_ = SplitRegex::none;
  bool byte_level_ = true;
  std::vector<NormalizerStep> normalizers_;
  std::optional<Metaspace> metaspace_;
  std::optional<std::string> split_after_;
  bool byte_fallback_ = false, fuse_unk_ = false;
  std::array<int32_t, 256> fallback_ids_{};  // <0xNN>'s id, or -1
  // For offsets: an added token's index in added_tokens_, a <0xNN> token's byte, by id.
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<int32_t, char> fallback_bytes_;
  std::optional<std::vector<DecoderStep>> decoders_;
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::string fingerprint_;
  std::vector<TokenizerFile> files_;
};

}  // namespace headroom
