// CPU embedding kernels, the CPU's embedding table (backend/embedding_kernels.h): a row gather in
// the weight's own dtype (exact, so bf16 tables are never widened) and a deterministic fp32
// scatter-add for the weight gradient that reads grad_out in its own dtype.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace headroom::cpu {

// EmbeddingKernels::first_bad_id: the flat index of the first id outside [0, num_embeddings).
std::optional<int64_t> embedding_first_bad_id(const Tensor& ids, int64_t num_embeddings);

// EmbeddingKernels::forward: out[t, :] = weight[ids[t], :], weight and out contiguous in one
// dtype, ids contiguous i32 / i64 and in range.
void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out);

// EmbeddingKernels::backward: grad_weight (f32 [num_embeddings, dim]) = 0, then
// grad_weight[ids[t], :] += grad_out[t, :] for t in order, grad_out contiguous in f32, bf16 or
// f16 and widened a column block at a time. Threads split the dim columns, so each sum is taken
// in one fixed order whatever the thread count.
void embedding_backward(const Tensor& grad_out, const Tensor& ids, const Tensor& grad_weight);

}  // namespace headroom::cpu
