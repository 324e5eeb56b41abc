// Scratch files for the fuzz targets (see fuzz_support.h).
#include "fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace headroom::fuzz {

namespace {

// The directory, removed with its files when the process exits normally.
struct ScratchDir {
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = (std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
            ("headroom-fuzz-" + std::to_string(::getpid())))
               .string();
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

}  // namespace

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

std::string write_scratch_file(const std::string& name, std::string_view bytes) {
  const std::string path = (std::filesystem::path(scratch_dir()) / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

std::pair<std::string_view, std::string_view> split_input(std::string_view data,
                                                          std::string_view separator) {
  const size_t at = data.find(separator);
  if (at == std::string_view::npos) return {data, {}};
  return {data.substr(0, at), data.substr(at + separator.size())};
}

}  // namespace headroom::fuzz
