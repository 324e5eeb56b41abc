// Reading and parsing JSON files with errors that name the file.
#include "core/json_file.h"

#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <vector>

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

std::string shortened(std::string_view text) {
  constexpr size_t kMax = 40;
  return text.size() > kMax ? str_cat(text.substr(0, kMax - 3), "...") : std::string(text);
}

namespace {

// Note [Bounded JSON]: the parser's callback sees each object and array open (at its depth, the
// outermost 0) and each key, and throws before the value nests deeper or takes a key twice.
template <typename Json>
Json parse_bounded(std::string_view text, const std::string& source) {
  if (text.size() > kMaxJsonBytes) {
    throw ValueError(str_cat(source, ": invalid JSON: ", text.size(), " bytes, more than the ",
                             kMaxJsonBytes, " a JSON file may have"));
  }
  std::vector<std::set<std::string>> keys;  // per open object or array (arrays' stay empty)
  auto bounds = [&](int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start) {
      if (depth >= kMaxJsonDepth) {
        throw ValueError(
            str_cat(source, ": invalid JSON: nested deeper than ", kMaxJsonDepth, " levels"));
      }
      keys.emplace_back();
    } else if (event == Event::object_end || event == Event::array_end) {
      keys.pop_back();
    } else if (event == Event::key &&
               !keys.back().insert(parsed.template get<std::string>()).second) {
      throw ValueError(str_cat(source, ": invalid JSON: key \"",
                               shortened(parsed.template get<std::string>()),
                               "\" appears twice in one object"));
    }
    return true;
  };
  try {
    return Json::parse(text, bounds);
  } catch (const nlohmann::json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; the rest is the reason.
    std::string_view reason = e.what();
    if (const size_t tag_end = reason.find("] ");
        !reason.empty() && reason[0] == '[' && tag_end != std::string_view::npos) {
      reason.remove_prefix(tag_end + 2);
    }
    throw ValueError(str_cat(source, ": invalid JSON: ", reason));
  }
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  return parse_bounded<nlohmann::json>(text, source);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source) {
  return parse_bounded<nlohmann::ordered_json>(text, source);
}

std::string describe_json(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  return str_cat(value.type_name(), " ",
                 shortened(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

}  // namespace headroom
