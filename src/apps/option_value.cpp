// Strict text-to-value conversions for options: the whole text must be the value.
#include "apps/option_value.h"

#include <array>
#include <charconv>
#include <cmath>
#include <string>

#include "core/error.h"

namespace headroom {

int64_t parse_integer_value(std::string_view text, std::string_view where) {
  const std::optional<int64_t> value = whole_number<int64_t>(text);
  if (!value) throw ValueError(str_cat(where, ": '", text, "' is not an integer"));
  return *value;
}

double parse_real_value(std::string_view text, std::string_view where) {
  const std::optional<double> value = whole_number<double>(text);
  if (!value) throw ValueError(str_cat(where, ": '", text, "' is not a number"));
  if (!std::isfinite(*value)) {
    throw ValueError(str_cat(where, ": '", text, "' is not a finite number"));
  }
  return *value;
}

bool parse_bool_value(std::string_view text, std::string_view where) {
  if (const std::optional<bool> value = bool_word(text)) return *value;
  throw ValueError(
      str_cat(where, ": '", text, "' is not a boolean (yes/no, true/false, t/f, y/n, 1/0)"));
}

std::string format_real(double value) {
  std::array<char, 32> buffer{};
  auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  std::string text(buffer.data(), ec == std::errc() ? end : buffer.data());
  // to_chars writes 3.0 as "3"; Python's "3.0" shows that the option is a number, not a count.
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

}  // namespace headroom
