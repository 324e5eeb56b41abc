// What every fuzz target shares: parsers that take a path get the input as a file in a scratch
// directory of this process, and a parser may reject its input only with headroom's typed errors
// (anything else escaping, a crash or a sanitizer report is a finding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace headroom::fuzz {

// A directory of this process, made on first use and removed at exit; targets overwrite the
// files they use.
const std::string& scratch_dir();

// Writes `bytes` to scratch_dir()/name and returns the path.
std::string write_scratch_file(const std::string& name, std::string_view bytes);

// Splits `data` at the first occurrence of `separator` (a whole file into two), for targets that
// need two files; without it, everything is the first part.
std::pair<std::string_view, std::string_view> split_input(std::string_view data,
                                                          std::string_view separator);

// Runs `parse`; headroom::Error (ValueError, IndexError, ...) is the expected way to reject an
// input and is swallowed; any other exception escapes and libFuzzer reports it as a crash.
template <typename F>
void expect_typed_errors(F&& parse);

}  // namespace headroom::fuzz

#include "core/error.h"

template <typename F>
void headroom::fuzz::expect_typed_errors(F&& parse) {
  try {
    parse();
  } catch (const headroom::Error&) {
  }
}
