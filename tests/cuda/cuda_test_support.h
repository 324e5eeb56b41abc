// What the CUDA test files share: the device they test, the skip without one, and the bitwise
// comparison with the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/device.h"

namespace headroom {

inline constexpr Device kGpu{DeviceType::cuda, 0};

#define REQUIRE_GPU()                                                             \
  do {                                                                            \
    if (!cuda_is_available()) GTEST_SKIP() << "no CUDA device present: skipped"; \
  } while (0)

// Bitwise equality of two f32 vectors (NaN payloads included); `actual` is the GPU's.
inline void expect_same_bits(const std::vector<float>& expected, const std::vector<float>& actual,
                             const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  size_t mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(&expected[i], &actual[i], sizeof(float)) != 0 && ++mismatches <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << " on the GPU, "
                    << expected[i] << " on the CPU";
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

}  // namespace headroom
