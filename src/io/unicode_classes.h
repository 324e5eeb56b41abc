// The Unicode character classes that GPT-2's pre-tokenizer regex uses (\p{L}, \p{N}, \s) and a
// lenient UTF-8 decoder, so the pre-tokenizer can be a hand-written scanner.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace headroom {

enum class CharClass : unsigned char { letter, number, whitespace, other };

// Letters are general categories L*, numbers N* (all planes, Unicode 14 tables from
// tools/gen_unicode_classes.py); whitespace is the White_Space property, as the regex engine of
// HF tokenizers (Oniguruma) reads \s.
inline CharClass char_class(char32_t code_point);

// One character of `text` starting at `pos`: its code point and its length in bytes. A byte that
// does not start a valid UTF-8 sequence (stray continuation, overlong form, surrogate, truncated
// sequence) is one character of length 1 with code point kInvalidCodePoint, class `other`, so any
// byte string scans and round-trips.
struct Utf8Char {
  char32_t code_point;
  size_t length;
};
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;
inline Utf8Char decode_utf8(std::string_view text, size_t pos);

// A word character as Rust's regex \w reads one (Alphabetic, marks, decimal digits, connector
// punctuation such as '_', joiners), which HF tokenizers' single_word added tokens test: 'é',
// 'Ⅻ', '٣' and a combining accent are word characters, '²', '½' and '①' are not.
bool is_word_char(char32_t code_point);

// Appends the UTF-8 form of a valid code point.
void append_utf8(std::string& out, char32_t code_point);

// `bytes` with each invalid UTF-8 sequence (the longest start of a valid one, or one byte)
// replaced by U+FFFD, as Rust's String::from_utf8_lossy and Python's errors="replace" do.
std::string utf8_lossy(std::string_view bytes);

// The non-ASCII halves of char_class and decode_utf8; ASCII, most of the text the pre-tokenizer
// scans, is handled inline.
CharClass char_class_non_ascii(char32_t code_point);
Utf8Char decode_utf8_multibyte(std::string_view text, size_t pos);

inline CharClass char_class(char32_t cp) {
  if (cp >= 0x80) return char_class_non_ascii(cp);
  if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CharClass::letter;
  if (cp >= '0' && cp <= '9') return CharClass::number;
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CharClass::whitespace;
  return CharClass::other;
}

inline Utf8Char decode_utf8(std::string_view text, size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) return {b0, 1};
  return decode_utf8_multibyte(text, pos);
}

}  // namespace headroom
