// The tokenizer tests' reference: tests/fixtures/tokenizer/reference.json, the texts and the ids
// and decodings HF tokenizers and the sentencepiece library give (tools/gen_tokenizer_fixtures.py).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/json_file.h"

namespace headroom::io_test {

inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(HEADROOM_FIXTURES_DIR) + "/tokenizer/" + name;
}

inline const nlohmann::json& tokenizer_reference() {
  static const nlohmann::json reference = [] {
    const std::string path = tokenizer_fixture("reference.json");
    return parse_json(read_text_file(path), path);
  }();
  return reference;
}

}  // namespace headroom::io_test
