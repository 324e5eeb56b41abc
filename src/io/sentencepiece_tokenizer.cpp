// SentencePieceTokenizer: the model is read as bytes (also hashed for the fingerprint) and
// handed to the library; library errors become ValueErrors naming the file.
#include "io/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/error.h"
#include "io/json_file.h"

namespace headroom {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const std::string bytes = read_text_file(model_path);
  if (const auto status = processor_->LoadFromSerializedProto(bytes); !status.ok()) {
    throw ValueError(str_cat(model_path, ": not a valid SentencePiece model: ", status.ToString()));
  }
  fingerprint_ = tokenizer_fingerprint(kind(), {bytes});
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  if (const auto status = processor_->Encode(text, &ids); !status.ok()) {
    throw ValueError(str_cat(path_, ": SentencePiece cannot encode the text: ", status.ToString()));
  }
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const int64_t size = vocab_size();
  for (const int32_t id : ids) {
    if (id < 0 || id >= size) {
      throw ValueError(str_cat(path_, ": token id ", id, " is not in the vocabulary (size ",
                               size, ")"));
    }
  }
  std::string text;
  const std::vector<int> pieces(ids.begin(), ids.end());
  if (const auto status = processor_->Decode(pieces, &text); !status.ok()) {
    throw ValueError(str_cat(path_, ": SentencePiece cannot decode the ids: ", status.ToString()));
  }
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::optional<int32_t> SentencePieceTokenizer::eos_token_id() const {
  const int id = processor_->eos_id();
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace headroom
