// torch's fp32 mean on the CPU, reproduced in its order of additions, for the host and a CUDA
// kernel alike: double quantization's offset (backend/quantization_kernels.h).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace headroom::cpu {

// Note [Mean of the absmax as torch sums]
// Double quantization centres the absmax values on offset = absmax.mean(), which torch computes
// on the CPU as sum(x) / n in fp32, its sum being cascade_sum (aten/native/cpu/SumKernel.cpp):
// 8-lane vectors (the sum kernel is not dispatched to AVX-512; AVX2, NEON and the default build
// all have 8 floats) summed in 4 interleaved accumulators (ilp) with multi-level partial sums
// of 2^max(4, ceil(log2(size)) / 4) steps, the remaining vectors into the first accumulator,
// the accumulators added in order, then the tail scalars and the 8 lanes. Inputs shorter than
// a vector take the same shape on scalars. torch splits a reduction over threads above 32768
// elements (a weight of more than 2M values at blocksize 64); this reproduces the one-thread
// order, which its split can change by an ulp.

HEADROOM_HD inline int64_t torch_sum_ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x) - 1; v != 0; v >>= 1) ++bits;
  return bits;
}

// torch's multi_row_sum + row_sum over `count` items of kWidth floats each (item i at
// x + i * kWidth), items grouped in rows of 4; the lanes of the sum go to `lanes`.
template <int kWidth>
HEADROOM_HD void torch_row_sum(const float* x, int64_t count, float* lanes) {
  constexpr int kIlp = 4, kLevels = 4;
  const int64_t size = count / kIlp;
  const int64_t log = torch_sum_ceil_log2(size) / kLevels;
  const int64_t level_power = log > 4 ? log : 4;
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  float acc[kLevels][kIlp][kWidth] = {};
  auto add = [](float* dst, const float* src) {
    for (int l = 0; l < kWidth; ++l) dst[l] += src[l];
  };
  int64_t i = 0;
  while (i + level_step <= size) {
    for (int64_t j = 0; j < level_step; ++j, ++i) {
      for (int k = 0; k < kIlp; ++k) add(acc[0][k], x + (i * kIlp + k) * kWidth);
    }
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < kIlp; ++k) {
        add(acc[j][k], acc[j - 1][k]);
        for (int l = 0; l < kWidth; ++l) acc[j - 1][k][l] = 0.0f;
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < size; ++i) {
    for (int k = 0; k < kIlp; ++k) add(acc[0][k], x + (i * kIlp + k) * kWidth);
  }
  for (int j = 1; j < kLevels; ++j) {
    for (int k = 0; k < kIlp; ++k) add(acc[0][k], acc[j][k]);
  }
  for (int64_t t = size * kIlp; t < count; ++t) add(acc[0][0], x + t * kWidth);
  for (int k = 1; k < kIlp; ++k) add(acc[0][0], acc[0][k]);
  for (int l = 0; l < kWidth; ++l) lanes[l] = acc[0][0][l];
}

HEADROOM_HD inline float torch_mean_f32(const float* x, int64_t n) {
  constexpr int kLanes = 8;
  float sum = 0.0f;
  if (n < kLanes) {
    torch_row_sum<1>(x, n, &sum);
  } else {
    const int64_t vectors = n / kLanes;
    float lanes[kLanes];
    torch_row_sum<kLanes>(x, vectors, lanes);
    for (int64_t k = vectors * kLanes; k < n; ++k) sum += x[k];
    for (float lane : lanes) sum += lane;
  }
  return sum / static_cast<float>(n);
}

}  // namespace headroom::cpu
