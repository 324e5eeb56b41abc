// ByteTokenizer, load_tokenizer, save_tokenizer and the fingerprint every tokenizer uses.
#include "io/tokenizer.h"

#include <cstdio>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/gpt2_bpe_tokenizer.h"
#include "core/json_file.h"
#include "io/sentencepiece_tokenizer.h"

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

std::vector<TokenOffsets> Tokenizer::offsets(std::string_view, std::span<const int32_t>) const {
  throw NotImplementedError(str_cat(
      "the ", kind(), " tokenizer gives no token offsets (an assistant-only loss needs them)"));
}

std::vector<TokenOffsets> ByteTokenizer::offsets(std::string_view text,
                                                 std::span<const int32_t> ids) const {
  if (ids.size() != text.size()) {
    throw ValueError(
        str_cat("ByteTokenizer: ", ids.size(), " ids for a text of ", text.size(), " bytes"));
  }
  std::vector<TokenOffsets> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) out[i] = {i, i + 1};
  return out;
}

std::vector<TokenOffsets> align_token_pieces(std::string_view text,
                                             std::span<const TokenPiece> pieces,
                                             std::span<const int32_t> ids) {
  const auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  const auto skip_space = [&](size_t at) {
    while (at < text.size() && is_space(text[at])) ++at;
    return at;
  };
  std::vector<TokenOffsets> out;
  out.reserve(pieces.size());
  size_t at = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string_view piece = pieces[i].text;
    const size_t start = at;
    if (pieces[i].lstrip) at = skip_space(at);
    if (text.substr(at, piece.size()) != piece) {
      if (!piece.empty() && piece[0] == ' ' &&
          text.substr(at, piece.size() - 1) == piece.substr(1)) {
        piece.remove_prefix(1);
        if (piece.empty()) {
          // A marker token alone: HF aligns it with the character it was prepended to.
          size_t end = at + 1;
          while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
            ++end;
          }
          out.push_back({at, std::min(end, text.size())});
          continue;
        }
      } else if (const size_t past = skip_space(at);
                 past > at && text.substr(past, piece.size()) == piece) {
        at = past;  // whitespace a neighbour's strip took without saying so
      } else {
        throw ValueError(str_cat("token offsets: token ", i, " (id ", ids[i], ", \"",
                                 std::string(piece), "\") is not the text at byte ", at));
      }
    }
    size_t end = at + piece.size();
    if (pieces[i].rstrip) end = skip_space(end);
    out.push_back({pieces[i].lstrip ? start : at, end});
    at = end;
  }
  at = skip_space(at);  // whitespace an rstrip swallowed may end the text
  if (at != text.size()) {
    throw ValueError(str_cat("token offsets: the tokens end at byte ", at, " of a text of ",
                             text.size(), " bytes"));
  }
  return out;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (model_dir.empty()) return std::make_unique<ByteTokenizer>();
  if (!fs::is_directory(model_dir)) {
    throw ValueError(str_cat(model_dir,
                             ": is not a directory (the model directory to take the "
                             "tokenizer from)"));
  }
  const auto file = [&](const char* name) { return (fs::path(model_dir) / name).string(); };
  // Saved beside the tokenizer's files into every checkpoint (save_tokenizer): checked here, at
  // the start, as JSON objects, not copied on unread.
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (!fs::is_regular_file(file(name))) continue;
    if (!parse_json(read_text_file(file(name)), file(name)).is_object()) {
      throw ValueError(str_cat(file(name), ": expected a JSON object"));
    }
  }
  if (fs::exists(file("tokenizer.json"))) {
    return Gpt2BpeTokenizer::from_tokenizer_json(file("tokenizer.json"));
  }
  const bool vocab = fs::exists(file("vocab.json")), merges = fs::exists(file("merges.txt"));
  if (vocab && merges) {
    return Gpt2BpeTokenizer::from_vocab_and_merges(file("vocab.json"), file("merges.txt"));
  }
  if (fs::exists(file("tokenizer.model"))) {
    return std::make_unique<SentencePieceTokenizer>(file("tokenizer.model"));
  }
  if (vocab || merges) {
    throw ValueError(str_cat(model_dir, ": has ", vocab ? "vocab.json" : "merges.txt", " without ",
                             vocab ? "merges.txt" : "vocab.json",
                             "; a GPT-2 BPE tokenizer needs both"));
  }
  return std::make_unique<ByteTokenizer>();
}

void save_tokenizer(const Tokenizer& tokenizer, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::vector<TokenizerFile> files = tokenizer.files();
  // Everything is read and checked before `dir` changes.
  std::vector<std::pair<std::string, std::string>> writes;  // name, bytes
  for (const TokenizerFile& file : files) writes.emplace_back(file.name, read_text_file(file.path));
  std::vector<std::string_view> bytes;
  for (const auto& [name, text] : writes) bytes.push_back(text);
  if (!files.empty() && tokenizer_fingerprint(tokenizer.kind(), bytes) != tokenizer.fingerprint()) {
    std::string paths;
    for (const TokenizerFile& file : files) paths += str_cat(paths.empty() ? "" : ", ", file.path);
    throw ValueError(str_cat(paths, ": changed since the ", tokenizer.kind(),
                             " tokenizer was loaded from it; not saved"));
  }
  if (!files.empty()) {
    const fs::path source_dir = fs::path(files.front().path).parent_path();
    for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
      if (fs::is_regular_file(source_dir / name)) {
        const std::string path = (source_dir / name).string();
        std::string text = read_text_file(path);
        (void)parse_json(text, path);  // as load_tokenizer checked it: still JSON
        writes.emplace_back(name, std::move(text));
      }
    }
  }
  fs::create_directories(dir);
  for (const auto& [name, text] : writes) {
    write_file_atomically((fs::path(dir) / name).string(), text);
  }
  for (const char* name : kTokenizerFileNames) {
    if (!files.empty() && files.front().name == name) break;
    fs::remove(fs::path(dir) / name);
  }
}

std::string tokenizer_fingerprint(std::string_view kind,
                                  std::initializer_list<std::string_view> file_bytes) {
  return tokenizer_fingerprint(
      kind, std::span<const std::string_view>(file_bytes.begin(), file_bytes.size()));
}

std::string tokenizer_fingerprint(std::string_view kind,
                                  std::span<const std::string_view> file_bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto add = [&](std::string_view bytes) {
    for (const char c : bytes) {
      hash ^= static_cast<unsigned char>(c);
      hash *= 0x100000001b3ull;
    }
  };
  add(kind);
  for (const std::string_view bytes : file_bytes) {
    // The length (8 bytes, little-endian) keeps ("ab", "c") and ("a", "bc") apart.
    char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((bytes.size() >> (8 * i)) & 0xFF);
    add(std::string_view(length, sizeof(length)));
    add(bytes);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

}  // namespace headroom
