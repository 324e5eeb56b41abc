// Listing corpus files and splitting them into documents.
#include "data/text_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <system_error>

#include "core/error.h"
#include "core/json_file.h"
#include "io/unicode_classes.h"

namespace headroom {

namespace {

namespace fs = std::filesystem;

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Why a directory walk leaves `entry` out, or nullptr to keep it. `output_dir` is canonical (or
// empty).
const char* skip_reason(const fs::directory_entry& entry, const fs::path& output_dir) {
  const std::string name = entry.path().filename().string();
  if (is_hidden(entry.path())) return "hidden";
  std::error_code ec;
  if (entry.is_directory(ec)) {
    if (!output_dir.empty() && fs::weakly_canonical(entry.path(), ec) == output_dir && !ec) {
      return "the run's output_dir";
    }
    // checkpoint-N and what a save or a rotation leaves beside it (tmp-checkpoint-N-PID, ...).
    static const std::regex checkpoint("(^|.*-)checkpoint-[0-9]+(-.*)?");
    if (std::regex_match(name, checkpoint)) return "a checkpoint";
    if (name == "__pycache__") return "a cache";
    // An earlier run's output_dir (HF's Trainer and headroom write trainer_state.json there).
    if (fs::exists(entry.path() / "trainer_state.json", ec)) return "a training run's output";
    return nullptr;
  }
  static const std::regex token_cache("tokens-[0-9a-f]{16}\\.bin");  // Note [Token cache file]
  if (std::regex_match(name, token_cache)) return "a token cache";
  return nullptr;
}

// Text must be UTF-8 without NUL bytes; ValueError naming `path` and the first offending byte.
void check_utf8_text(const std::string& path, std::string_view text) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw ValueError(str_cat("data file '", path, "' is binary (a NUL byte at offset ", nul,
                             "), not text: --data takes UTF-8 text or JSONL files"));
  }
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    if (c.code_point == kInvalidCodePoint) {
      char byte[8];
      std::snprintf(byte, sizeof(byte), "0x%02x", static_cast<unsigned char>(text[pos]));
      throw ValueError(str_cat("data file '", path, "' is not UTF-8: byte ", byte, " at offset ",
                               pos,
                               " does not start a valid sequence (convert the file first, "
                               "e.g. iconv -f latin1 -t utf-8)"));
    }
    pos += c.length;
  }
}

TextSourceFile describe_file(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    const int err = errno;
    throw ValueError(
        str_cat("cannot read '", p.string(), "': ", std::generic_category().message(err)));
  }
  TextSourceFile file;
  file.path = p.string();
  file.format = p.extension() == ".jsonl" ? TextFormat::jsonl : TextFormat::plain;
  file.size = static_cast<uint64_t>(st.st_size);
  file.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return file;
}

void read_jsonl(const TextSourceFile& file, const std::string& contents,
                const std::function<void(std::string&&)>& on_document) {
  for_each_jsonl_line(contents, [&](std::string_view line, int64_t line_number) {
    const std::string where = str_cat(file.path, ":", line_number);
    nlohmann::json record = parse_json(line, where);
    if (!record.is_object()) {
      throw ValueError(str_cat(where, ": the line is ", describe_json(record),
                               ", not an object with a \"text\" field"));
    }
    auto text = record.find("text");
    if (text == record.end()) {
      throw ValueError(str_cat(where, ": the object has no \"text\" field"));
    }
    if (!text->is_string()) {
      throw ValueError(str_cat(where, ": \"text\" is ", describe_json(*text), ", not a string"));
    }
    on_document(std::move(text->get_ref<std::string&>()));
  });
}

}  // namespace

std::vector<TextSourceFile> list_text_files(const std::string& path, const std::string& output_dir,
                                            std::vector<SkippedPath>* skipped) {
  std::error_code ec;
  const fs::path root = fs::absolute(path, ec);
  const fs::file_status status = fs::status(root, ec);
  if (ec || !fs::exists(status)) {
    throw ValueError(str_cat("data '", path, "' does not exist"));
  }
  if (!fs::is_directory(status)) return {describe_file(root)};

  fs::path canonical_output_dir;
  if (!output_dir.empty())
    canonical_output_dir = fs::weakly_canonical(fs::absolute(output_dir, ec), ec);
  if (canonical_output_dir.filename().empty())
    canonical_output_dir = canonical_output_dir.parent_path();
  std::vector<fs::path> paths;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    if (const char* reason = skip_reason(*it, canonical_output_dir)) {
      if (it->is_directory()) it.disable_recursion_pending();
      if (skipped != nullptr) skipped->push_back({it->path().string(), reason});
      continue;
    }
    if (it->is_regular_file()) paths.push_back(it->path());
  }
  if (paths.empty()) {
    throw ValueError(str_cat("data directory '", path, "' holds no text files"));
  }
  std::sort(paths.begin(), paths.end(),
            [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
  if (skipped != nullptr) {
    std::sort(skipped->begin(), skipped->end(),
              [](const SkippedPath& a, const SkippedPath& b) { return a.path < b.path; });
  }
  std::vector<TextSourceFile> files;
  files.reserve(paths.size());
  for (const fs::path& p : paths) files.push_back(describe_file(p));
  return files;
}

std::string skipped_note(const std::string& data_path, const std::vector<SkippedPath>& skipped) {
  if (skipped.empty()) return "";
  constexpr size_t kShown = 5;
  std::error_code ec;
  const fs::path root = fs::absolute(data_path, ec);
  std::string note = str_cat("note: --data ", data_path, ": left out ");
  for (size_t i = 0; i < skipped.size() && i < kShown; ++i) {
    const fs::path relative = fs::path(skipped[i].path).lexically_relative(root);
    note += str_cat(i > 0 ? ", " : "", relative.empty() ? skipped[i].path : relative.string(), " (",
                    skipped[i].reason, ")");
  }
  if (skipped.size() > kShown) note += str_cat(" and ", skipped.size() - kShown, " more");
  return note;
}

void for_each_jsonl_line(
    std::string_view contents,
    const std::function<void(std::string_view line, int64_t number)>& on_line) {
  size_t start = 0;
  int64_t number = 0;
  while (start < contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == std::string_view::npos) end = contents.size();
    ++number;
    const std::string_view line = contents.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) on_line(line, number);
  }
}

void read_documents(const TextSourceFile& file,
                    const std::function<void(std::string&& text)>& on_document) {
  std::string contents = read_text_file(file.path);
  check_utf8_text(file.path, contents);
  if (file.format == TextFormat::jsonl) {
    read_jsonl(file, contents, on_document);
  } else {
    on_document(std::move(contents));
  }
}

std::vector<std::string> read_text_documents(const std::string& path) {
  std::vector<std::string> documents;
  for (const TextSourceFile& file : list_text_files(path)) {
    read_documents(file, [&](std::string&& text) { documents.push_back(std::move(text)); });
  }
  return documents;
}

}  // namespace headroom
