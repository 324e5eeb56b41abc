// Reads TOML (toml++), JSON (nlohmann) and YAML (yaml-cpp) config files into ConfigEntry lists.
#include "apps/config_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>
#include <yaml-cpp/yaml.h>

#include "apps/option_value.h"
#include "core/error.h"
#include "core/json_file.h"

namespace headroom {
namespace {

std::string read_text(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ValueError(str_cat(path, ": is a directory"));
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ValueError(str_cat(path, ": cannot open the config file (", std::strerror(errno), ")"));
  }
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

ConfigValue other(std::string text) {
  ConfigValue v;
  v.kind = ConfigValue::Kind::other;
  v.text = std::move(text);
  return v;
}

ConfigValue toml_value(const toml::node& node) {
  ConfigValue v;
  std::ostringstream text;
  if (const auto* b = node.as_boolean()) {
    v.kind = ConfigValue::Kind::boolean;
    v.boolean = b->get();
  } else if (const auto* i = node.as_integer()) {
    v.kind = ConfigValue::Kind::integer;
    v.integer = i->get();
  } else if (const auto* f = node.as_floating_point()) {
    v.kind = ConfigValue::Kind::real;
    v.real = f->get();
    text << *f;
    v.text = text.str();
  } else if (const auto* s = node.as_string()) {
    v.kind = ConfigValue::Kind::string;
    v.text = s->get();
  } else {
    v.kind = ConfigValue::Kind::other;
    v.text = node.is_table() ? "a table" : node.is_array() ? "an array" : "a date or time";
  }
  return v;
}

std::vector<ConfigEntry> read_toml(const std::string& path, const std::string& content) {
  toml::table table;
  try {
    table = toml::parse(content, path);
  } catch (const toml::parse_error& e) {
    throw ValueError(str_cat(path, ":", e.source().begin.line, ":", e.source().begin.column, ": ",
                             e.description()));
  }
  std::vector<ConfigEntry> entries;
  for (auto&& [key, node] : table) entries.push_back({std::string(key.str()), toml_value(node)});
  return entries;
}

ConfigValue json_value(const nlohmann::ordered_json& j) {
  ConfigValue v;
  v.text = j.dump();
  if (j.is_null()) {
    v.kind = ConfigValue::Kind::null;
  } else if (j.is_boolean()) {
    v.kind = ConfigValue::Kind::boolean;
    v.boolean = j.get<bool>();
  } else if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    v.kind = ConfigValue::Kind::real;  // too big for any integer option; reported as a number
    v.real = j.get<double>();
  } else if (j.is_number_integer()) {
    v.kind = ConfigValue::Kind::integer;
    v.integer = j.get<int64_t>();
  } else if (j.is_number_float()) {
    v.kind = ConfigValue::Kind::real;
    v.real = j.get<double>();
  } else if (j.is_string()) {
    v.kind = ConfigValue::Kind::string;
    v.text = j.get<std::string>();
  } else {
    return other(j.is_object() ? "an object" : "an array");
  }
  return v;
}

std::vector<ConfigEntry> read_json(const std::string& path, const std::string& content) {
  const nlohmann::ordered_json root = parse_ordered_json(content, path);
  if (!root.is_object()) {
    throw ValueError(str_cat(path, ": expected an object of option: value pairs at the top level"));
  }
  std::vector<ConfigEntry> entries;
  for (const auto& [key, value] : root.items()) entries.push_back({key, json_value(value)});
  return entries;
}

// YAML 1.2's core schema on a plain (unquoted) scalar; quoted scalars are always strings.
ConfigValue yaml_scalar(const YAML::Node& node) {
  ConfigValue v;
  v.text = node.Scalar();
  v.kind = ConfigValue::Kind::string;
  if (node.Tag() != "?") return v;  // "!" marks a quoted scalar
  const std::string& s = v.text;
  if (s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE") {
    v.kind = ConfigValue::Kind::boolean;
    v.boolean = s[0] == 't' || s[0] == 'T';
    return v;
  }
  // Words such as inf and nan stay strings, though from_chars would read them.
  if (s.find_first_of("0123456789") == std::string::npos) return v;
  const std::string_view number = std::string_view(s).substr(s.starts_with('+') ? 1 : 0);
  if (const std::optional<int64_t> integer = whole_number<int64_t>(number)) {
    v.kind = ConfigValue::Kind::integer;
    v.integer = *integer;
  } else if (const std::optional<double> real = whole_number<double>(number)) {
    v.kind = ConfigValue::Kind::real;
    v.real = *real;
  }
  return v;
}

std::vector<ConfigEntry> read_yaml(const std::string& path, const std::string& content) {
  YAML::Node root;
  try {
    root = YAML::Load(content);
  } catch (const YAML::Exception& e) {  // ParserException and the others (undefined anchors, ...)
    throw ValueError(str_cat(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  if (root.IsNull()) return {};
  if (!root.IsMap()) {
    throw ValueError(str_cat(path, ": expected a mapping of option: value pairs at the top level"));
  }
  std::vector<ConfigEntry> entries;
  for (const auto& item : root) {
    if (!item.first.IsScalar()) {  // `{}: 1`: YAML allows any node as a key
      throw ValueError(str_cat(path, ": line ", item.first.Mark().line + 1, ": the key is ",
                               item.first.IsMap()        ? "a mapping"
                               : item.first.IsSequence() ? "a sequence"
                                                         : "null",
                               ", not an option name"));
    }
    const YAML::Node& value = item.second;
    ConfigValue v;
    if (value.IsNull()) {
      v.kind = ConfigValue::Kind::null;
      v.text = "null";
    } else if (value.IsScalar()) {
      v = yaml_scalar(value);
    } else {
      v = other(value.IsMap() ? "a mapping" : "a sequence");
    }
    entries.push_back({item.first.as<std::string>(), std::move(v)});
  }
  return entries;
}

}  // namespace

std::string ConfigValue::describe() const {
  switch (kind) {
    case Kind::null:
      return "null";
    case Kind::boolean:
      return str_cat("the boolean ", boolean ? "true" : "false");
    case Kind::integer:
      return str_cat("the integer ", integer);
    case Kind::real:
      return str_cat("the number ", text);
    case Kind::string:
      return str_cat("the string '", text, "'");
    case Kind::other:
      return text;
  }
  return text;
}

std::vector<ConfigEntry> read_config_file(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension != ".toml" && extension != ".json" && extension != ".yaml" && extension != ".yml") {
    throw ValueError(str_cat(path, ": unknown config file type '", extension,
                             "' (expected .toml, .json, .yaml or .yml)"));
  }
  const std::string content = read_text(path);
  if (extension == ".toml") return read_toml(path, content);
  if (extension == ".json") return read_json(path, content);
  return read_yaml(path, content);
}

}  // namespace headroom
