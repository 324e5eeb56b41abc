// Character classes by binary search over generated range tables, with an ASCII fast path.
#include "io/unicode_classes.h"

#include <algorithm>
#include <iterator>
#include <string>

namespace headroom {
namespace {

struct CodePointRange {
  char32_t lo, hi;
};

#include "io/unicode_classes_table.inc"

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], char32_t cp) {
  const auto* it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                    [](char32_t v, const CodePointRange& r) { return v < r.lo; });
  return it != std::begin(ranges) && cp <= std::prev(it)->hi;
}

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace

CharClass char_class_non_ascii(char32_t cp) {
  if (cp == kInvalidCodePoint) return CharClass::other;
  if (in_ranges(kLetterRanges, cp)) return CharClass::letter;
  if (in_ranges(kNumberRanges, cp)) return CharClass::number;
  if (is_white_space(cp)) return CharClass::whitespace;
  return CharClass::other;
}

bool is_word_char(char32_t cp) { return cp != kInvalidCodePoint && in_ranges(kWordRanges, cp); }

Utf8Char decode_utf8_multibyte(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  size_t length;
  char32_t cp;
  char32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {kInvalidCodePoint, 1};
  }
  if (pos + length > text.size()) return {kInvalidCodePoint, 1};
  for (size_t i = 1; i < length; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return {kInvalidCodePoint, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalidCodePoint, 1};
  return {cp, length};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const Utf8Char c = decode_utf8(bytes, pos);
    if (c.code_point != kInvalidCodePoint) {
      out.append(bytes.substr(pos, c.length));
      pos += c.length;
      continue;
    }
    // How far the bytes follow a valid sequence: the second byte's range depends on the lead.
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
    const unsigned char lead = byte(pos);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) need = 1;
    if (lead >= 0xE0 && lead <= 0xEF) need = 2;
    if (lead >= 0xF0 && lead <= 0xF4) need = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
    size_t length = 1;
    while (length <= need && pos + length < bytes.size() && byte(pos + length) >= lo &&
           byte(pos + length) <= hi) {
      ++length;
      lo = 0x80, hi = 0xBF;
    }
    out += "\xEF\xBF\xBD";
    pos += length;
  }
  return out;
}

}  // namespace headroom
