// Softmax cross-entropy kernels on fp32 rows of logits. Targets are i32 or i64 and must already
// be checked (in range or equal to ignore_index) by the op.
#pragma once

#include <cstdint>

namespace headroom::cpu {

// lse[r] = log(sum_j exp(logits[r, j])) for each of `rows` rows of `vocab` logits. Returns the
// sum over rows whose target is not ignore_index of lse[r] - logits[r, target], in double,
// added in row order.
double cross_entropy_forward(const float* logits, const int64_t* targets, int64_t rows,
                             int64_t vocab, int64_t ignore_index, float* lse);
double cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows,
                             int64_t vocab, int64_t ignore_index, float* lse);

// dlogits[r] = (softmax(logits[r]) - onehot(target[r])) * scale, zero for ignored rows.
// dlogits may be logits itself (the gradient then replaces the logits in place).
void cross_entropy_backward(const float* logits, const float* lse, const int64_t* targets,
                            int64_t rows, int64_t vocab, int64_t ignore_index, float scale,
                            float* dlogits);
void cross_entropy_backward(const float* logits, const float* lse, const int32_t* targets,
                            int64_t rows, int64_t vocab, int64_t ignore_index, float scale,
                            float* dlogits);

}  // namespace headroom::cpu
