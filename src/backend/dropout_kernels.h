// The dropout's kernel table (Note [Kernel tables] in backend/kernel_table.h), and the dropout
// parameters attention's kernels share.
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// Attention dropout: the same Philox stream as the CPU kernel (backend/cpu/attention.h).
struct DropoutParams {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct DropoutKernels {
  static constexpr const char* kName = "dropout";

  // out = keep ? x * scale : 0 with keep decided as the CPU's kernel does (backend/cpu/dropout.cpp)
  // (24-bit word of the Philox stream at seed / offset + element index >= threshold).
  Kernel<void(const Tensor& x, uint64_t seed, uint64_t offset, uint32_t threshold, float scale,
              const Tensor& out)>
      apply{"apply"};
  // out = residual + r(keep ? x * scale : 0), r rounding to x's dtype, then out's dtype: dropout
  // and a residual add in one pass, with the values of apply into a tensor of x's dtype followed
  // by the element-wise add (ops/dropout.h: dropout_add). Same shapes, all contiguous.
  Kernel<void(const Tensor& x, const Tensor& residual, uint64_t seed, uint64_t offset,
              uint32_t threshold, float scale, const Tensor& out)>
      apply_add{"apply_add"};
};

}  // namespace headroom
