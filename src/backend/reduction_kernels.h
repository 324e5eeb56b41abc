// The sums' kernel table (Note [Kernel tables] in backend/kernel_table.h), and the size of
// sum_all's workspace, which every device uses so that a dry run plans it.
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// The partial sums sum_all needs for n elements: none up to kSumAllOneBlock (one block sums them
// all), else one per block of a fixed grid of kSumAllPartials, so the order of the additions, and
// with it the result, does not depend on the GPU. The op allocates them: a dry run sees them too.
inline constexpr int64_t kSumAllOneBlock = int64_t{1} << 16;
inline constexpr int64_t kSumAllPartials = 512;
inline int64_t sum_all_partials(int64_t n) { return n <= kSumAllOneBlock ? 0 : kSumAllPartials; }

struct ReductionKernels {
  static constexpr const char* kName = "reduction";

  // out (0-d) = factor * sum(x), summed in fp64 in a fixed order. partial: the workspace of
  // sum_all_partials(x.numel()) fp64 sums (in an i64 tensor's bytes: there is no f64 dtype), or
  // undefined when that is 0.
  Kernel<void(const Tensor& x, double factor, const Tensor& partial, const Tensor& out)> sum_all{
      "sum_all"};
  // out[o, i] = factor * sum_j x[o, j, i] for x [outer, n, inner].
  Kernel<void(const Tensor& x, int64_t outer, int64_t n, int64_t inner, double factor,
              const Tensor& out)>
      sum_middle{"sum_middle"};
  // Every element of dst = factor * scalar, where scalar is a 0-d tensor read on the device (the
  // backward of a full reduction, with no host read of the incoming gradient).
  Kernel<void(const Tensor& dst, const Tensor& scalar, double factor)> fill_scaled{"fill_scaled"};
};

}  // namespace headroom
