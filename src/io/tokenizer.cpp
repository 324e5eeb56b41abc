// ByteTokenizer and load_tokenizer.
#include "io/tokenizer.h"

#include <filesystem>

#include "core/error.h"

namespace headroom {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > 255) {
      throw ValueError(str_cat("ByteTokenizer: token id ", ids[i], " is outside 0..255"));
    }
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (!model_dir.empty()) {
    for (const char* file : {"tokenizer.json", "vocab.json", "tokenizer.model"}) {
      if (fs::exists(fs::path(model_dir) / file)) {
        throw NotImplementedError(str_cat(model_dir, "/", file,
                                          ": this tokenizer format is not supported yet"));
      }
    }
  }
  return std::make_unique<ByteTokenizer>();
}

}  // namespace headroom
