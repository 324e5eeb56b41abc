// Reading and parsing JSON files with errors that name the file.
#include "io/json_file.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/error.h"

namespace headroom {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;  // before anything else can touch errno
    throw ValueError(str_cat("cannot read '", path, "': ", std::generic_category().message(err)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ValueError(str_cat("cannot read '", path, "': read error"));
  return text.str();
}

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; the rest is the reason.
    std::string_view reason = e.what();
    if (const size_t tag_end = reason.find("] "); !reason.empty() && reason[0] == '[' &&
                                                  tag_end != std::string_view::npos) {
      reason.remove_prefix(tag_end + 2);
    }
    throw ValueError(str_cat(source, ": invalid JSON: ", reason));
  }
}

std::string describe_json(const nlohmann::json& value) {
  constexpr size_t kMaxText = 40;
  if (value.is_null()) return "null";
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxText) text = text.substr(0, kMaxText - 3) + "...";
  return str_cat(value.type_name(), " ", text);
}

}  // namespace headroom
