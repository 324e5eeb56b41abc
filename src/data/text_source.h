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
  std::string path;  // absolute
  TextFormat format = TextFormat::plain;
  uint64_t size = 0;     // bytes
  int64_t mtime_ns = 0;  // last modification, ns since the epoch
};

// An entry of a data directory that list_text_files left out, and why ("hidden", "the run's
// output_dir", "a checkpoint", "a training run's output", "a token cache", "a cache").
struct SkippedPath {
  std::string path;
  std::string reason;
};

// The files of `path`: the file itself, or every regular file under the directory, recursively,
// sorted by path (byte order, so every machine agrees). A directory walk leaves out what is not
// the user's text: hidden files and directories (names starting with '.'), `output_dir` (a run
// writing into the data directory must not train on its own metrics.jsonl and checkpoints),
// checkpoint directories (checkpoint-N, tmp-checkpoint-N-PID, ...), other runs' output
// directories (those holding trainer_state.json), headroom's token cache files (tokens-<key>.bin)
// and __pycache__; each is added to `skipped` when given. Files ending in
// ".jsonl" are JSONL, all others plain text. ValueError when `path` does not exist or a directory
// holds no files.
std::vector<TextSourceFile> list_text_files(const std::string& path,
                                            const std::string& output_dir = "",
                                            std::vector<SkippedPath>* skipped = nullptr);

// One line telling the user what a walk of `data_path` left out ("" when nothing): the first few
// entries, relative to `data_path`, with their reasons, and how many more.
std::string skipped_note(const std::string& data_path, const std::vector<SkippedPath>& skipped);

// Calls `on_document(text)` for each document of `file`, in order. The file must be UTF-8 text:
// a NUL byte makes it binary, and an invalid UTF-8 sequence is an error too (as HF datasets'
// loaders, which decode strictly), both ValueErrors naming the file and the byte offset. A bad
// JSONL line is a ValueError "<file>:<line>: <problem>".
void read_documents(const TextSourceFile& file,
                    const std::function<void(std::string&& text)>& on_document);

// Calls `on_line(line, number)` for each line of JSONL `contents` that is not blank, numbered
// from 1 as editors number them.
void for_each_jsonl_line(std::string_view contents,
                         const std::function<void(std::string_view line, int64_t number)>& on_line);

// The documents of every file of `path`, in order (small corpora and tests; the token cache
// streams instead).
std::vector<std::string> read_text_documents(const std::string& path);

}  // namespace headroom
