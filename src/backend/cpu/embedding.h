// CPU embedding kernels: a row gather in the weight's own dtype (exact, so bf16 tables are never
// widened) and a deterministic fp32 scatter-add for the weight gradient.
#pragma once

#include <cstddef>
#include <cstdint>

namespace headroom::cpu {

// Index of the first id outside [0, num_embeddings), or -1 when all are in range.
template <typename Id>
int64_t first_bad_id(const Id* ids, int64_t count, int64_t num_embeddings);

// out[t, :] = weight[ids[t], :]; rows of row_bytes bytes. Ids must be in range.
template <typename Id>
void embedding_gather(const void* weight, const Id* ids, void* out, int64_t count,
                      size_t row_bytes);

// grad_weight [num_embeddings, dim] = 0, then grad_weight[ids[t], :] += grad_out[t, :] for t in
// order. Threads split the dim columns, so each sum is accumulated in one fixed order.
template <typename Id>
void embedding_backward(const float* grad_out, const Id* ids, float* grad_weight, int64_t count,
                        int64_t num_embeddings, int64_t dim);

}  // namespace headroom::cpu
