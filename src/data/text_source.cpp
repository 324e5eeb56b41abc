// Listing corpus files and splitting them into documents.
#include "data/text_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "io/json_file.h"

namespace headroom {

namespace {

namespace fs = std::filesystem;

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

TextSourceFile describe_file(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    const int err = errno;
    throw ValueError(str_cat("cannot read '", p.string(), "': ",
                             std::generic_category().message(err)));
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
  size_t start = 0;
  int64_t line_number = 0;
  while (start < contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == std::string::npos) end = contents.size();
    ++line_number;
    const std::string_view line(contents.data() + start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
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
  }
}

}  // namespace

std::vector<TextSourceFile> list_text_files(const std::string& path) {
  std::error_code ec;
  const fs::path root = fs::absolute(path, ec);
  const fs::file_status status = fs::status(root, ec);
  if (ec || !fs::exists(status)) {
    throw ValueError(str_cat("data '", path, "' does not exist"));
  }
  if (!fs::is_directory(status)) return {describe_file(root)};

  std::vector<fs::path> paths;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    if (is_hidden(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) paths.push_back(it->path());
  }
  if (paths.empty()) {
    throw ValueError(str_cat("data directory '", path, "' holds no text files"));
  }
  std::sort(paths.begin(), paths.end(),
            [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
  std::vector<TextSourceFile> files;
  files.reserve(paths.size());
  for (const fs::path& p : paths) files.push_back(describe_file(p));
  return files;
}

void read_documents(const TextSourceFile& file,
                    const std::function<void(std::string&& text)>& on_document) {
  std::string contents = read_text_file(file.path);
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
