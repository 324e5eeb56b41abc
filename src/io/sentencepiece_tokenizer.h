// SentencePiece models (Llama's tokenizer.model) through Debian's libsentencepiece, so ids are
// the reference library's own.
#pragma once

#include <memory>
#include <string>

#include "io/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace headroom {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // ValueError names the file when it is unreadable or not a SentencePiece model.
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  // As the Python library's encode(text): the model's normaliser (e.g. Llama's dummy prefix,
  // "Hello" -> "▁Hello"), no BOS or EOS.
  std::vector<int32_t> encode(std::string_view text) const override;
  // As the library's decode(ids); an id outside the vocabulary is a ValueError.
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  // The model's eos_id; nullopt when the model has none (-1).
  std::optional<int32_t> eos_token_id() const override;
  std::string kind() const override { return "sentencepiece"; }
  std::string fingerprint() const override { return fingerprint_; }
  std::vector<TokenizerFile> files() const override { return {{"tokenizer.model", path_}}; }

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string fingerprint_;
};

}  // namespace headroom
