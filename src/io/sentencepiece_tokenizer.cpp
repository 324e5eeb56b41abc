// SentencePieceTokenizer: the model is read as bytes (also hashed for the fingerprint) and
// handed to the library; library errors become ValueErrors naming the file.
#include "io/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "core/json_file.h"

namespace headroom {

namespace {

// Note [Checking a SentencePiece normalisation trie]
// The library trusts a model's precompiled_charsmap (NormalizerSpec field 2): a 4-byte trie size,
// a darts-clone double array of 32-bit units, then NUL-terminated replacement strings. Encoding
// walks the array by unit offsets without bounds checks, so a corrupt model reads past its
// buffer. darts-clone builds arrays of whole 256-unit blocks, whose every unit's child block
// (index ^ offset) lies inside the array, and leaf values index the strings; a trie that breaks
// either rule is refused here. Returns "" when the charsmap is sound (or absent), else why not.
std::string check_charsmap(std::string_view blob) {
  if (blob.size() <= 4) return "";  // the library refuses it itself
  uint32_t trie_bytes;
  std::memcpy(&trie_bytes, blob.data(), 4);
  if (trie_bytes >= blob.size()) return "";  // likewise
  if (trie_bytes > blob.size() - 4) {        // the library's own check lets these through
    return str_cat("its normalization rules' trie of ", trie_bytes, " bytes runs past them");
  }
  const size_t units = trie_bytes / 4;
  const std::string_view strings = blob.substr(4 + trie_bytes);
  if (units == 0 || units % 256 != 0) {
    return str_cat("its normalization rules hold a trie of ", units,
                   " units, not whole blocks of 256");
  }
  auto unit = [&](size_t i) {
    uint32_t u;
    std::memcpy(&u, blob.data() + 4 + 4 * i, 4);
    return u;
  };
  auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1U << 9)) >> 6); };
  for (size_t i = 0; i < units; ++i) {
    const uint32_t u = unit(i);
    if ((u & ((1U << 31) | 0xFF)) > 0xFF && i != 0) continue;  // a leaf's value, never walked
    const size_t child = i ^ offset(u);
    if (child >= units) {
      return str_cat("its normalization rules hold a trie unit ", i, " pointing outside it");
    }
    if (i != 0 && ((u >> 8) & 1) != 0) {
      const uint32_t value = unit(child) & ((1U << 31) - 1);
      if (value >= strings.size() || strings.find('\0', value) == std::string_view::npos) {
        return str_cat("its normalization rules map to string ", value, " outside them");
      }
    }
  }
  return "";
}

// Reads a protobuf varint at `pos`; false at the end or on a varint longer than 10 bytes.
bool read_varint(std::string_view bytes, size_t& pos, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 70 && pos < bytes.size(); shift += 7) {
    const auto byte = static_cast<unsigned char>(bytes[pos++]);
    value |= static_cast<uint64_t>(byte & 0x7F) << (shift < 64 ? shift : 63);
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// Calls `on_field(number, payload)` for each length-delimited field of the message `bytes`;
// stops quietly at malformed data (the library then refuses the model).
template <typename F>
void for_each_bytes_field(std::string_view bytes, F&& on_field) {
  size_t pos = 0;
  uint64_t key, value;
  while (pos < bytes.size() && read_varint(bytes, pos, key)) {
    switch (key & 7) {
      case 0:
        if (!read_varint(bytes, pos, value)) return;
        break;
      case 1:
        pos += 8;
        break;
      case 5:
        pos += 4;
        break;
      case 2:
        if (!read_varint(bytes, pos, value) || value > bytes.size() - std::min(pos, bytes.size()))
          return;
        on_field(key >> 3, bytes.substr(pos, value));
        pos += value;
        break;
      default:
        return;
    }
  }
}

// The first problem of any precompiled_charsmap of the normalizer (field 3) or denormalizer
// (field 5) of a ModelProto, or "".
std::string check_model_charsmaps(std::string_view model) {
  std::string problem;
  for_each_bytes_field(model, [&](uint64_t field, std::string_view spec) {
    if (!problem.empty() || (field != 3 && field != 5)) return;
    for_each_bytes_field(spec, [&](uint64_t spec_field, std::string_view charsmap) {
      if (problem.empty() && spec_field == 2) problem = check_charsmap(charsmap);
    });
  });
  return problem;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const std::string bytes = read_text_file(model_path);
  if (const std::string problem = check_model_charsmaps(bytes); !problem.empty()) {
    throw ValueError(str_cat(model_path, ": not a valid SentencePiece model: ", problem));
  }
  sentencepiece::util::Status status;
  try {
    status = processor_->LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {  // e.g. its trie builder's (darts) own exception
    throw ValueError(str_cat(model_path, ": not a valid SentencePiece model: ", e.what()));
  }
  if (!status.ok()) {
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
      throw ValueError(
          str_cat(path_, ": token id ", id, " is not in the vocabulary (size ", size, ")"));
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
