// The text a causal LM trains on: a plain text file, a directory of them, or JSONL with a "text"
// field per line, turned into an ordered list of documents (run_clm's `text` / `json` datasets).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

enum class TextFormat {
  plain,  // the whole file is one document
  jsonl,  // each non-blank line is {"text": "..."}, one document (other fields are ignored)
};

// One file of a corpus, with what the token cache key needs to notice that it changed.
struct TextSourceFile {
  std::string path;         // absolute
  TextFormat format = TextFormat::plain;
  uint64_t size = 0;        // bytes
  int64_t mtime_ns = 0;     // last modification, ns since the epoch
};

// The files of `path`: the file itself, or every regular file under the directory, recursively,
// sorted by path (byte order, so every machine agrees), skipping hidden files and directories
// (names starting with '.'). Files ending in ".jsonl" are JSONL, all others plain text.
// ValueError when `path` does not exist or a directory holds no files.
std::vector<TextSourceFile> list_text_files(const std::string& path);

// Calls `on_document(text)` for each document of `file`, in order. A bad JSONL line is a
// ValueError "<file>:<line>: <problem>".
void read_documents(const TextSourceFile& file,
                    const std::function<void(std::string&& text)>& on_document);

// The documents of every file of `path`, in order (small corpora and tests; the token cache
// streams instead).
std::vector<std::string> read_text_documents(const std::string& path);

}  // namespace headroom
