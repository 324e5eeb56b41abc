// Reading corpora: a plain file, a directory (sorted, recursive, hidden files skipped), JSONL,
// and the errors for bad JSONL lines and missing data.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/data_test_helpers.h"
#include "data/text_source.h"

namespace headroom {
namespace {

using data_test::expect_error;
using data_test::TempDir;
using data_test::write_bytes;

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

}  // namespace
}  // namespace headroom
