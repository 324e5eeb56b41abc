// The walk of the CPU's elementwise optimizers (Lion, SGD, LOMO) over a parameter: spans of
// kOptimizerSpan elements, the parameter and its gradient seen as fp32 (f32 in place, bf16 / f16
// widened into the span's buffers), the parameter rounded once into its dtype after the update,
// as the CUDA kernels load, update in fp32 and store. No fp32 copy of a whole parameter is made.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cpu/widen_rows.h"
#include "core/tensor.h"

namespace headroom::cpu {

inline constexpr int64_t kOptimizerSpan = 512;
// Elements below which one thread updates the whole parameter (memory-bound: the fork costs
// more than the update).
inline constexpr int64_t kOptimizerParallelGrain = int64_t{1} << 16;

// update(p, g, offset, count) for each span [offset, offset + count) of the contiguous `param`
// and `grad`: p is the span as fp32, to update in place; g the gradient's. Spans run on OpenMP
// threads for large parameters; each element is updated by one call, so results do not depend
// on the thread count.
template <typename Update>
void for_each_optimizer_span(const Tensor& param, const Tensor& grad, const Update& update) {
  const int64_t n = param.numel();
  const int64_t spans = (n + kOptimizerSpan - 1) / kOptimizerSpan;
#pragma omp parallel for schedule(static) if (n >= kOptimizerParallelGrain)
  for (int64_t s = 0; s < spans; ++s) {
    alignas(64) float param_buf[kOptimizerSpan];
    alignas(64) float grad_buf[kOptimizerSpan];
    const int64_t offset = s * kOptimizerSpan;
    const int64_t count = std::min(kOptimizerSpan, n - offset);
    widen_span(param, offset, count, param_buf);
    float* p = span_target(param, offset, param_buf);
    update(p, widen_span(grad, offset, count, grad_buf), offset, count);
    store_span(param, offset, count, p);
  }
}

}  // namespace headroom::cpu
