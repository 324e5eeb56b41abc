// Helpers shared by the io/ tests: a scratch directory removed afterwards, raw file writes, and
// an assertion that a call throws a given error whose message holds given pieces.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace headroom::io_test {

// A fresh directory under the system's temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            str_cat("headroom_io_test_", ::getpid(), "_", counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // A path inside the directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `call`, expecting an exception of type E whose message contains every piece.
template <typename E>
void expect_error(const std::function<void()>& call, std::initializer_list<std::string> pieces) {
  try {
    call();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& piece : pieces) {
      EXPECT_NE(message.find(piece), std::string::npos)
          << "message lacks \"" << piece << "\": " << message;
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another exception type: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw";
}

}  // namespace headroom::io_test
