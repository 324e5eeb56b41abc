// The error tiers: a user's mistake names its option (ValueError), a bug names its source line
// (HEADROOM_INTERNAL_ASSERT's InternalError).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace headroom {
namespace {

int checked_half(int n) {
  HEADROOM_INTERNAL_ASSERT(n % 2 == 0, "checked_half: ", n, " is odd");
  return n / 2;
}

TEST(InternalAssert, HoldsSilentlyAndNamesTheLineWhenBroken) {
  EXPECT_EQ(checked_half(4), 2);
  try {
    checked_half(3);
    FAIL() << "no InternalError";
  } catch (const InternalError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("internal error at ", 0), 0u) << message;
    EXPECT_NE(message.find("test_error.cpp:13 (n % 2 == 0): checked_half: 3 is odd"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("this is a bug in headroom"), std::string::npos) << message;
  }
  // An Error, so that every caller's handler (the CLI's one line, MPI's abort) still takes it.
  EXPECT_THROW(checked_half(1), Error);
}

}  // namespace
}  // namespace headroom
