// Reading corpora: a plain file, a directory (sorted, recursive, hidden files skipped), JSONL,
// and the errors for bad JSONL lines and missing data.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "data/data_test_helpers.h"
#include "data/text_source.h"

namespace headroom {
namespace {

using data_test::expect_error;
using data_test::TempDir;
using data_test::write_bytes;

void fs_mkdir(const std::string& path) { std::filesystem::create_directories(path); }

TEST(TextSource, PlainFileIsOneDocument) {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "line one\nline two\n");
  const std::vector<std::string> docs = read_text_documents(dir.file("a.txt"));
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0], "line one\nline two\n");
}

TEST(TextSource, DirectoryIsSortedRecursiveAndSkipsHiddenFiles) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("sub/deeper"));
  std::filesystem::create_directories(dir.file(".git"));
  write_bytes(dir.file("b.txt"), "B");
  write_bytes(dir.file("a.txt"), "A");
  write_bytes(dir.file("sub/deeper/d.txt"), "D");
  write_bytes(dir.file("sub/c.jsonl"), "{\"text\": \"C1\"}\n{\"text\": \"C2\"}\n");
  write_bytes(dir.file(".hidden.txt"), "hidden");
  write_bytes(dir.file(".git/config"), "hidden too");
  write_bytes(dir.file("sub/.swap"), "hidden three");

  const std::vector<TextSourceFile> files = list_text_files(dir.str());
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0].path, dir.file("a.txt"));
  EXPECT_EQ(files[3].path, dir.file("sub/deeper/d.txt"));
  EXPECT_EQ(files[2].format, TextFormat::jsonl);
  EXPECT_EQ(files[0].size, 1u);
  EXPECT_EQ(read_text_documents(dir.str()), (std::vector<std::string>{"A", "B", "C1", "C2", "D"}));
}

TEST(TextSource, JsonlIsOneDocumentPerLine) {
  TempDir dir;
  write_bytes(dir.file("d.jsonl"),
              "{\"text\": \"first\\nwith newline\", \"id\": 1}\n"
              "\n"
              "   \r\n"
              "{\"text\": \"\"}\n"
              "{\"meta\": {\"x\": 1}, \"text\": \"last, no final newline\"}");
  EXPECT_EQ(read_text_documents(dir.file("d.jsonl")),
            (std::vector<std::string>{"first\nwith newline", "", "last, no final newline"}));
}

TEST(TextSource, BadJsonlLineNamesFileLineAndProblem) {
  TempDir dir;
  const std::string path = dir.file("bad.jsonl");
  write_bytes(path, "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  expect_error<ValueError>([&] { read_text_documents(path); },
                           {path + ":2: invalid JSON", "parse error"});
  write_bytes(path, "{\"text\": \"ok\"}\n\n{\"body\": \"x\"}\n");
  expect_error<ValueError>([&] { read_text_documents(path); },
                           {path + ":3: the object has no \"text\" field"});
  write_bytes(path, "{\"text\": 3}\n");
  expect_error<ValueError>([&] { read_text_documents(path); },
                           {path + ":1: \"text\" is number 3, not a string"});
  write_bytes(path, "[\"text\"]\n");
  expect_error<ValueError>([&] { read_text_documents(path); },
                           {path + ":1: the line is array", "not an object with a \"text\" field"});
}

TEST(TextSource, MissingPathAndEmptyDirectoryAreErrors) {
  TempDir dir;
  expect_error<ValueError>([&] { list_text_files(dir.file("nope.txt")); },
                           {dir.file("nope.txt"), "does not exist"});
  std::filesystem::create_directories(dir.file("empty"));
  write_bytes(dir.file("empty/.only_hidden"), "x");
  expect_error<ValueError>([&] { list_text_files(dir.file("empty")); },
                           {dir.file("empty"), "holds no text files"});
}

// The run's own output_dir inside the data directory (its metrics.jsonl, checkpoints and token
// cache), checkpoints of other runs, caches and hidden entries are left out, each with a note
// (issue 19, defect 9).
TEST(TextSource, DirectorySkipsOutputDirCheckpointsAndCachesWithANote) {
  TempDir dir;
  namespace fs = std::filesystem;
  for (const char* sub : {"run/checkpoint-2", "old/checkpoint-10", "old/tmp-checkpoint-12-345",
                          "run/cache", "notes/__pycache__", ".git", "prev"}) {
    fs::create_directories(dir.file(sub));
  }
  write_bytes(dir.file("a.txt"), "A");
  write_bytes(dir.file("notes/b.txt"), "B");
  write_bytes(dir.file("run/metrics.jsonl"), "{\"loss\": 2.0}\n");
  write_bytes(dir.file("run/checkpoint-2/config.json"), "{}");
  write_bytes(dir.file("run/cache/tokens-0123456789abcdef.bin"), "HRTOKEN");
  write_bytes(dir.file("old/checkpoint-10/trainer_state.json"), "{}");
  write_bytes(dir.file("old/tmp-checkpoint-12-345/config.json"), "{}");
  write_bytes(dir.file("old/tokens-fedcba9876543210.bin"), "HRTOKEN");
  write_bytes(dir.file("notes/__pycache__/x.pyc"), "pyc");
  write_bytes(dir.file(".git/config"), "git");
  write_bytes(dir.file("prev/trainer_state.json"), "{}");  // an earlier run's output_dir
  write_bytes(dir.file("prev/loss.png"), std::string("\x89PNG\r\n\x1a\n\0", 9));

  std::vector<SkippedPath> skipped;
  // Named as a user would, relative and with a trailing slash.
  const std::string output_dir = dir.file("notes/../run/");
  const std::vector<TextSourceFile> files = list_text_files(dir.str(), output_dir, &skipped);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].path, dir.file("a.txt"));
  EXPECT_EQ(files[1].path, dir.file("notes/b.txt"));
  std::map<std::string, std::string> reasons;
  for (const SkippedPath& s : skipped) reasons[s.path] = s.reason;
  EXPECT_EQ(reasons.size(), 7u);
  EXPECT_EQ(reasons[dir.file("prev")], "a training run's output");
  EXPECT_EQ(reasons[dir.file("run")], "the run's output_dir");
  EXPECT_EQ(reasons[dir.file("old/checkpoint-10")], "a checkpoint");
  EXPECT_EQ(reasons[dir.file("old/tmp-checkpoint-12-345")], "a checkpoint");
  EXPECT_EQ(reasons[dir.file("old/tokens-fedcba9876543210.bin")], "a token cache");
  EXPECT_EQ(reasons[dir.file("notes/__pycache__")], "a cache");
  EXPECT_EQ(reasons[dir.file(".git")], "hidden");
  const std::string note = skipped_note(dir.str(), skipped);
  EXPECT_NE(note.find("left out .git (hidden), notes/__pycache__ (a cache), "), std::string::npos)
      << note;
  EXPECT_NE(note.find(" and 2 more"), std::string::npos) << note;
  // Without an output_dir the run's files are data, but its checkpoints and cache are not.
  skipped.clear();
  EXPECT_EQ(list_text_files(dir.str(), "", &skipped).size(), 3u);
}

// Binary files are refused by name, and so is text that is not UTF-8: HF datasets' `text` and
// `json` loaders stop there too (UnicodeDecodeError, with the byte and its position) (issue 19,
// defect 10).
TEST(TextSource, BinaryAndNonUtf8FilesAreErrorsNamingFileAndOffset) {
  TempDir dir;
  const std::string elf = dir.file("ls");
  write_bytes(elf, std::string("\x7f"
                               "ELF\x02\x01\x01\0\0\0",
                               10));
  expect_error<ValueError>([&] { read_text_documents(elf); },
                           {elf, "binary", "NUL byte at offset 7"});
  fs_mkdir(dir.file("bin"));
  write_bytes(dir.file("bin/a.o"), std::string("\0\0\0\x01", 4));
  write_bytes(dir.file("bin/b.o"), std::string("\x01\0", 2));
  expect_error<ValueError>([&] { read_text_documents(dir.file("bin")); },
                           {dir.file("bin/a.o"), "binary", "offset 0"});

  const std::string latin1 = dir.file("latin1.txt");
  write_bytes(latin1, "caf\xe9 cr\xe8me\n");
  expect_error<ValueError>([&] { read_text_documents(latin1); },
                           {latin1, "not UTF-8", "byte 0xe9 at offset 3"});
  const std::string jsonl = dir.file("latin1.jsonl");
  write_bytes(jsonl, "{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n");
  expect_error<ValueError>([&] { read_text_documents(jsonl); },
                           {jsonl, "not UTF-8", "byte 0xe9 at offset 28"});
  // Truncated sequence at the end, and an encoded surrogate.
  write_bytes(latin1, "ok \xe2\x82");
  expect_error<ValueError>([&] { read_text_documents(latin1); }, {"byte 0xe2 at offset 3"});
  write_bytes(latin1, "\xed\xa0\x80");
  expect_error<ValueError>([&] { read_text_documents(latin1); }, {"byte 0xed at offset 0"});
  // Valid UTF-8 of every length passes untouched.
  write_bytes(latin1, "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(read_text_documents(latin1),
            std::vector<std::string>{"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"});
}

}  // namespace
}  // namespace headroom
