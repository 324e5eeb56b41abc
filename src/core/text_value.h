// Values read from text strictly, the whole text being the value: numbers (std::from_chars: no
// leading '+' or spaces, no trailing junk) and HF's boolean words. Callers word their own errors.
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>

namespace headroom {

// `text` as a T when all of it is one.
template <typename T>
std::optional<T> whole_number(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || stop != end) return std::nullopt;
  return value;
}

// HF's string_to_bool / strtobool words, any case: yes/no, true/false, t/f, y/n, 1/0.
inline std::optional<bool> bool_word(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* yes : {"yes", "true", "t", "y", "1"}) {
    if (lower == yes) return true;
  }
  for (const char* no : {"no", "false", "f", "n", "0"}) {
    if (lower == no) return false;
  }
  return std::nullopt;
}

}  // namespace headroom
