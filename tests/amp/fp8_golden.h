// Reading tests/fixtures/amp/fp8_recipe_golden.txt (tools/gen_fp8_golden.py): floats as the hex
// of their bits, bf16 inputs as 4 hex digits, FP8 bytes as one hex string.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "core/float_formats.h"

namespace headroom::fp8_test {

inline constexpr const char* kFp8Golden = "amp/fp8_recipe_golden.txt";

inline float hex_f32(const std::string& word) {
  return detail::f32_from_bits(static_cast<uint32_t>(std::stoul(word, nullptr, 16)));
}

// The rest of the line: floats as 8 hex digits, or bf16 values as 4 (widened exactly).
inline std::vector<float> read_hex_floats(std::istream& in) {
  std::vector<float> values;
  std::string word;
  while (in >> word) {
    values.push_back(word.size() == 4
                         ? bf16_bits_to_f32(static_cast<uint16_t>(std::stoul(word, nullptr, 16)))
                         : hex_f32(word));
  }
  return values;
}

inline std::vector<uint8_t> read_hex_bytes(std::istream& in) {
  std::string hex;
  in >> hex;
  std::vector<uint8_t> bytes(hex.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return bytes;
}

}  // namespace headroom::fp8_test
