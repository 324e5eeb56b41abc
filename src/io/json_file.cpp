// Reading and parsing JSON files with errors that name the file.
#include "io/json_file.h"

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

namespace {

// A key or excerpt as an error shows it: at most 40 characters.
std::string shortened(std::string_view text) {
  constexpr size_t kMax = 40;
  return text.size() > kMax ? str_cat(text.substr(0, kMax - 3), "...") : std::string(text);
}

// Note [Bounded JSON]: the SAX pass that checks depth and duplicate keys before anything is
// built; `error` says what stopped it.
class BoundsCheck final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string error;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return enter();
  }
  bool key(string_t& key) override {
    if (keys_.back().insert(key).second) return true;
    error = str_cat("key \"", shortened(key), "\" appears twice in one object");
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    keys_.emplace_back();  // keeps keys_ one per level; never used
    return enter();
  }
  bool end_array() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override {
    return false;  // the real parse reports it, with nlohmann's reason
  }

 private:
  bool enter() {
    if (++depth_ <= kMaxJsonDepth) return true;
    error = str_cat("nested deeper than ", kMaxJsonDepth, " levels");
    return false;
  }
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;
};

void check_json_bounds(std::string_view text, const std::string& source) {
  if (text.size() > kMaxJsonBytes) {
    throw ValueError(str_cat(source, ": invalid JSON: ", text.size(), " bytes, more than the ",
                             kMaxJsonBytes, " a JSON file may have"));
  }
  BoundsCheck check;
  (void)nlohmann::json::sax_parse(text, &check);
  if (!check.error.empty()) throw ValueError(str_cat(source, ": invalid JSON: ", check.error));
}

template <typename Json>
Json parse_bounded(std::string_view text, const std::string& source) {
  check_json_bounds(text, source);
  try {
    return Json::parse(text);
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

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  return parse_bounded<nlohmann::json>(text, source);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source) {
  return parse_bounded<nlohmann::ordered_json>(text, source);
}

std::string describe_json(const nlohmann::json& value) {
  constexpr size_t kMaxText = 40;
  if (value.is_null()) return "null";
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxText) text = text.substr(0, kMaxText - 3) + "...";
  return str_cat(value.type_name(), " ", text);
}

}  // namespace headroom
