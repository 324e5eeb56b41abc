// The Unicode helpers of the GPT-2 pre-tokenizer: classes as Oniguruma's \p{L}, \p{N} and \s
// read them, and lossy UTF-8 decoding as Python's and Rust's.
#include "io/unicode_classes.h"

#include <gtest/gtest.h>

#include <string>

namespace headroom {
namespace {

TEST(TokenizerUnicode, CharacterClasses) {
  for (char32_t letter : {U'a', U'Z', U'é', U'ß', U'ı', U'Ж', U'ع', U'中', U'ア', U'한', U'ʰ'}) {
    EXPECT_EQ(char_class(letter), CharClass::letter) << static_cast<uint32_t>(letter);
  }
  for (char32_t number : {U'0', U'9', U'½', U'٣', U'Ⅻ', U'²', U'𝟘'}) {
    EXPECT_EQ(char_class(number), CharClass::number) << static_cast<uint32_t>(number);
  }
  for (char32_t space : {U' ', U'\t', U'\n', U'\v', U'\f', U'\r', U'\u0085', U'\u00a0', U'\u2007',
                         U'\u2028', U'\u3000'}) {
    EXPECT_EQ(char_class(space), CharClass::whitespace) << static_cast<uint32_t>(space);
  }
  for (char32_t other : {U'!', U'\'', U'_', U'\u0301', U'\u200b', U'\ufeff', U'🙂', U'\x1c'}) {
    EXPECT_EQ(char_class(other), CharClass::other) << static_cast<uint32_t>(other);
  }
}

TEST(TokenizerUnicode, LossyUtf8AsPython) {
  // Python: bytes.decode("utf-8", "replace").
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("ok é 中 🙂"), "ok é 中 🙂");
  EXPECT_EQ(utf8_lossy("\xe4\xb8"), fffd);
  EXPECT_EQ(utf8_lossy("\xe4\xb8"
                       "A"),
            fffd + "A");
  EXPECT_EQ(utf8_lossy("\xed\xa0\x80"), fffd + fffd + fffd);
  EXPECT_EQ(utf8_lossy("\xf0\x9f\x99"), fffd);
  EXPECT_EQ(utf8_lossy("\xc0\xaf"), fffd + fffd);
  EXPECT_EQ(utf8_lossy("\x80\xff"), fffd + fffd);
  EXPECT_EQ(utf8_lossy("\xf4\x90\x80\x80"), fffd + fffd + fffd + fffd);
}

}  // namespace
}  // namespace headroom
