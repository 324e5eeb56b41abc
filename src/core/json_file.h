// JSON reading shared by every reader of files from strangers (safetensors headers, index files,
// config.json, adapter and DeepSpeed files, a 4-bit quant state): parse errors and type
// complaints that name the file.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace headroom {

// The whole file; ValueError names the path and the system's reason.
std::string read_text_file(const std::string& path);

// Note [Bounded JSON]
// Every JSON headroom reads (options files, HF and PEFT configs, tokenizer.json, safetensors
// headers, DeepSpeed files, JSONL rows, checkpoints) comes through parse_json: files from
// strangers. nlohmann parses iteratively, but what follows does not: dumping a value (an error
// message's excerpt) and walking it recurse once per level, so text nested 1e5 deep overflows
// the stack. The parse itself refuses (through nlohmann's parser callback) text nested more than
// kMaxJsonDepth levels, text over kMaxJsonBytes, and a key twice in one object (TOML and YAML
// refuse that too; nlohmann would keep the last silently).
inline constexpr int kMaxJsonDepth = 512;
inline constexpr size_t kMaxJsonBytes = size_t{1} << 30;

// Parses `text`; ValueError "<source>: invalid JSON: <the parser's reason>", or naming the
// depth, size or duplicate key and its limit (Note [Bounded JSON]).
nlohmann::json parse_json(std::string_view text, const std::string& source);
// The same, keeping the objects' keys in the file's order.
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source);

// A key, name or excerpt as an error line shows it: at most 40 characters (a 10 MB key from a
// stranger's file is not echoed whole).
std::string shortened(std::string_view text);

// A value as an error message shows it: its JSON type and, shortened, its text, e.g.
// `string "768"`, `number -3`, `null`, `array [1,2,3]`.
std::string describe_json(const nlohmann::json& value);

}  // namespace headroom
