// Flash-attention-2 style attention kernels on the CPU: query tiles against key tiles with an
// online softmax, keeping only the per-row log-sum-exp; backward recomputes the probabilities
// tile by tile. The tile products run on cpu::gemm (single-threaded inside our OpenMP regions).
#pragma once

#include <cstdint>

namespace headroom::cpu {

struct AttentionDims {
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads;  // divides q_heads: query head h reads kv head h / (q_heads / kv_heads)
  int64_t q_len;
  int64_t kv_len;
  int64_t head_dim;
};

// A [B, H, T, D] operand whose last dimension is contiguous (element strides of the rest).
struct AttentionOperand {
  const float* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
};

// Dropout on the probabilities: element (b, h, i, j) is kept when the uniform number of linear
// index ((b * q_heads + h) * q_len + i) * kv_len + j from (seed, offset) is >= p, and then scaled
// by 1 / (1 - p); see Note [Philox stream layout]. p == 0 disables it.
struct AttentionDropout {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct AttentionProblem {
  AttentionDims dims;
  AttentionOperand q, k, v;
  bool causal;  // key j > query i masked (q_len == kv_len)
  float scale;
  AttentionDropout dropout;
};

// out [B, Hq, Tq, D] and lse [B, Hq, Tq] contiguous; lse = max + log(sum) of the undropped,
// scaled scores of each row.
void attention_forward(const AttentionProblem& problem, float* out, float* lse);

// grad_q [B, Hq, Tq, D], grad_k / grad_v [B, Hkv, Tk, D] contiguous, written (not accumulated).
// out and grad_out are contiguous [B, Hq, Tq, D]; delta is a [B, Hq, Tq] workspace.
// Deterministic: no atomics, every gradient element is summed in a fixed order.
void attention_backward(const AttentionProblem& problem, const float* out, const float* grad_out,
                        const float* lse, float* delta, float* grad_q, float* grad_k,
                        float* grad_v);

}  // namespace headroom::cpu
