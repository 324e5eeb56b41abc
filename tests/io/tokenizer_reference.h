// The tokenizer tests' references: tests/fixtures/tokenizer/*.json, the texts and the ids and
// decodings HF tokenizers and the sentencepiece library give (tools/gen_tokenizer_*fixtures.py),
// and the check of a tokenizer against one family's entry of them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_file.h"
#include "io/gpt2_bpe_tokenizer.h"
#include "io/io_test_helpers.h"
#include "io/tokenizer.h"

namespace headroom::io_test {

inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(HEADROOM_FIXTURES_DIR) + "/tokenizer/" + name;
}

// A reference file of tests/fixtures/tokenizer/, parsed once.
inline const nlohmann::json& tokenizer_reference_file(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, nlohmann::json> parsed;
  std::lock_guard lock(mutex);
  auto it = parsed.find(name);
  if (it == parsed.end()) {
    const std::string path = tokenizer_fixture(name);
    it = parsed.emplace(name, parse_json(read_text_file(path), path)).first;
  }
  return it->second;
}

inline const nlohmann::json& tokenizer_reference() {
  return tokenizer_reference_file("reference.json");
}

inline std::vector<int32_t> reference_ids(const nlohmann::json& ids) {
  return ids.get<std::vector<int32_t>>();
}

// `ref` holds, for texts[ref["texts"][k]] (texts[k] without that list), the ids HF gives with and
// without special tokens and its decodings of the latter; `tokenizer` must give the same.
inline void expect_tokenizer_matches_reference(const Tokenizer& tokenizer,
                                               const nlohmann::json& ref,
                                               const nlohmann::json& texts,
                                               const std::string& name) {
  EXPECT_EQ(tokenizer.vocab_size(), ref["vocab_size"].get<int64_t>()) << name;
  for (size_t k = 0; k < ref["ids"].size(); ++k) {
    const size_t i = ref.contains("texts") ? ref["texts"][k].get<size_t>() : k;
    const std::string text = texts[i].get<std::string>();
    EXPECT_EQ(tokenizer.encode(text), reference_ids(ref["ids"][k])) << name << " text " << i;
    EXPECT_EQ(tokenizer.encode_with_special_tokens(text),
              reference_ids(ref["ids_with_special_tokens"][k]))
        << name << " text " << i;
    EXPECT_EQ(tokenizer.decode(reference_ids(ref["ids"][k])), ref["decoded"][k].get<std::string>())
        << name << " text " << i;
  }
}

// A family's fixture tokenizer.json (`good`) and a reader of edited copies of it, written into a
// scratch directory at `path`: for the tests of what is refused.
struct EditedTokenizerJson {
  explicit EditedTokenizerJson(const std::string& family)
      : good(parse_json(read_text_file(tokenizer_fixture(family + "/tokenizer.json")), family)),
        path(dir.file("tokenizer.json")) {}
  void load(const nlohmann::json& root) const {
    write_bytes(path, root.dump());
    Gpt2BpeTokenizer::from_tokenizer_json(path);
  }
  TempDir dir;
  const nlohmann::json good;
  const std::string path;
};

}  // namespace headroom::io_test
