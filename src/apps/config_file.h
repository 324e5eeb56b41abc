// Config files (`headroom train --config run.toml`): one flat table of option = value in TOML,
// JSON or YAML, chosen by the file's extension, read into one typed list so that every format is
// checked by the same code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace headroom {

struct ConfigValue {
  // `other`: a table, an array or a TOML date, which no option takes.
  enum class Kind { null, boolean, integer, real, string, other };
  Kind kind = Kind::null;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string text;  // the string, or the value as the file wrote it (for error messages)

  // "a boolean", "an integer", ...: for "expected an integer, got a string '8'".
  std::string describe() const;
};

struct ConfigEntry {
  std::string key;  // as written in the file (snake_case or kebab-case)
  ConfigValue value;
};

// The entries of `path` in file order: .toml (TOML 1.0), .json, .yaml or .yml. YAML scalars are
// typed as YAML 1.2's core schema types them (quoted ones are strings). ValueError naming the
// file for a file that cannot be read, a syntax error (with line and column), a top level that is
// not a table, or another extension.
std::vector<ConfigEntry> read_config_file(const std::string& path);

}  // namespace headroom
