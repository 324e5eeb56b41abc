// What the CUDA tests share: the device they test and the skip without one, the device's
// synchronisation, and comparisons of a GPU result with the CPU reference, bit for bit or under
// a stated tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/device_kernels.h"
#include "core/tensor.h"

namespace headroom {

inline constexpr Device kGpu{DeviceType::cuda, 0};

#define REQUIRE_GPU()                                                                        \
  do {                                                                                       \
    if (!::headroom::cuda_is_available()) GTEST_SKIP() << "no CUDA device present: skipped"; \
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

// Waits for the GPU's queued kernels (timings, and statistics read after asynchronous work).
inline void synchronize_gpu() {
  const DeviceKernels* kernels = find_device_kernels(DeviceType::cuda);
  if (kernels && kernels->synchronize) kernels->synchronize(kGpu.index);
}

// |actual - expected| <= rtol * |expected| + atol_fraction * max |expected| + atol for every
// element: rtol bounds the error of each value, atol_fraction that of values that cancel to near
// zero, relative to the tensor's scale, and atol that of a tensor that is rounding noise
// throughout (its scale is the noise's).
struct Tolerance {
  double rtol = 1e-5;
  double atol_fraction = 1e-6;
  double atol = 0.0;
};

// Compares `actual` (any device and dtype) with `expected`: shapes equal, values within `tol`;
// reports the first few mismatches and their count under `what`.
inline void expect_close(const Tensor& actual, const Tensor& expected, Tolerance tol,
                         const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.to(kCPU).to(DType::f32).to_float_vector();
  const std::vector<float> b = expected.to(kCPU).to(DType::f32).to_float_vector();
  double largest = 0.0;
  for (float v : b) largest = std::max(largest, static_cast<double>(std::abs(v)));
  size_t mismatches = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double bound = tol.rtol * std::abs(b[i]) + tol.atol_fraction * largest + tol.atol + 1e-30;
    const bool same_special = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
    if (!same_special && !(std::abs(static_cast<double>(a[i]) - b[i]) <= bound) &&
        ++mismatches <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << " on the GPU, " << b[i]
                    << " on the CPU (bound " << bound << ")";
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << a.size() << " differ";
}

}  // namespace headroom
