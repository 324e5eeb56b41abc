// JSON reading shared by the io/ readers (safetensors headers, index files, config.json): parse
// errors and type complaints that name the file, as every io/ error does.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace headroom {

// The whole file; ValueError names the path and the system's reason.
std::string read_text_file(const std::string& path);

// Parses `text`; ValueError "<source>: invalid JSON: <the parser's reason>". The parse is
// iterative in nlohmann, so a hostile nesting depth cannot overflow the stack.
nlohmann::json parse_json(std::string_view text, const std::string& source);

// A value as an error message shows it: its JSON type and, shortened, its text, e.g.
// `string "768"`, `number -3`, `null`, `array [1,2,3]`.
std::string describe_json(const nlohmann::json& value);

}  // namespace headroom
