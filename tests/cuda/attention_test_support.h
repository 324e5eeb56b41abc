// What the GPU attention tests share (test_cuda_attention.cpp, test_cuda_cudnn_attention.cpp):
// their comparison with the CPU reference, under the tolerances of the Note below.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace headroom {

// Note [Attention tolerances on the GPU]
// Per element: |gpu - cpu| <= rtol * (|cpu| + mean |cpu|) + floor * max |cpu|. rtol covers the
// output's own rounding (one ulp of the dtype). The floor covers what the GPU rounds that the
// fp32 CPU reference does not: as FlashAttention, the kernel rounds P to the dtype before P V and
// dP = dO V^T, so an output carries up to a unit roundoff of the values it averages (2^-9 of |V|
// in bf16; the first rows of a causal mask average one or two), and dS = P (dP - D) subtracts
// D = rowsum(dO o O) of the rounded O, which cancels to noise where dQ is zero in exact
// arithmetic (a query with one key). Four ulps of the tensor's largest magnitude: 2^-6 (bf16),
// 2^-9 (f16); a wrong mask, index or scale is off by the largest magnitude itself. The floor is at
// least 1e-6 absolute (inputs are of order 1): the same cancellation leaves ~2e-7 in every dtype.
// Measured on an H200 (2026-11-28): every case's max |gpu - cpu| / max |cpu| is printed (and
// kept in ctest's JUnit output) as "measured"; the largest over all cases were out / dQ / dK / dV
// 3.3e-3 / 4.3e-3 / 6.1e-3 / 3.4e-3 in bf16 (floor 1.6e-2), 4.4e-4 / 5.5e-4 / 4.4e-4 / 4.2e-4 in
// f16 (floor 2.0e-3) and below 7.3e-7 in f32.
inline double tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 2e-5;
    case DType::bf16:
      return 1e-2;
    default:
      return 3e-3;
  }
}

inline double floor_of(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1.0 / 64;
    case DType::f16:
      return 1.0 / 512;
    default:
      return 0.0;
  }
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, DType dtype,
                         const std::string& what, double noise = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = tolerance_of(dtype);
  double mean_abs = 0.0, largest = 0.0, worst = 0.0;
  for (float w : want) {
    mean_abs += std::fabs(w);
    largest = std::max(largest, static_cast<double>(std::fabs(w)));
  }
  mean_abs /= std::max<size_t>(want.size(), 1);
  // At least `noise`: where the reference is zero throughout (dQ, dK with one key) the GPU holds
  // rounding noise of ~2e-7 in every dtype (measured, one row of D 64).
  const double floor = std::max(noise, floor_of(dtype) * largest);
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, diff);
    const double bound = tol * (std::fabs(static_cast<double>(want[i])) + mean_abs) + floor;
    if (!(diff <= bound) && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " on the GPU, " << want[i]
                    << " on the CPU (difference " << diff << ", bound " << bound << ")";
    }
  }
  std::printf("measured: %s: max |gpu - cpu| / max |cpu| = %.3g (max |cpu| %.3g)\n", what.c_str(),
              largest > 0 ? worst / largest : worst, largest);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off";
}

}  // namespace headroom
