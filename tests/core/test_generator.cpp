// Philox4x32-10 against Random123's known-answer vectors, and the stream layout.
#include <gtest/gtest.h>

#include "core/generator.h"
#include "core/philox.h"

namespace headroom {
namespace {

TEST(Philox, KnownAnswerZero) {
  Philox4x32Block out = philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(out.word[0], 0x6627e8d5u);
  EXPECT_EQ(out.word[1], 0xe169c58du);
  EXPECT_EQ(out.word[2], 0xbc57ac4cu);
  EXPECT_EQ(out.word[3], 0x9b00dbd8u);
}

}  // namespace
}  // namespace headroom
