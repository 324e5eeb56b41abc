// The closeness check of the model tests against recorded PyTorch references (test_models.cpp,
// peft/test_lora_golden.cpp): |a - b| <= rtol * max|b| for every element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace headroom::test_data {

// |a - b| <= rtol * max|b| for every element: relative to the tensor's scale.
inline void expect_close(const Tensor& actual, const Tensor& expected, double rtol,
                         const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.to(DType::f32).to_float_vector();
  const std::vector<float> b = expected.to_float_vector();
  double scale = 0.0;
  for (float v : b) scale = std::max(scale, static_cast<double>(std::abs(v)));
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LE(worst, rtol * scale) << what << ": element " << at << " is " << a[at] << ", expected "
                                 << b[at] << " (scale " << scale << ")";
}

}  // namespace headroom::test_data
