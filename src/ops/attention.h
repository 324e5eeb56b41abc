// Scaled dot-product attention, flash-attention style: computed tile by tile with an online
// softmax, keeping only the per-row log-sum-exp for backward (never the T x T probabilities);
// backward recomputes the probabilities tile by tile.
#pragma once

#include <optional>

#include "backend/attention_kernels.h"
#include "core/generator.h"
#include "core/tensor.h"

namespace headroom {

// q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D] with Hq a multiple of Hkv (grouped-query attention:
// query head h reads key/value head h / (Hq / Hkv)); any strides. Returns [B, Hq, Tq, D]
// contiguous. `scale` defaults to 1/sqrt(D). is_causal masks key j > query i (aligned at the
// start, Tq == Tk). dropout_p drops attention probabilities from the Philox stream of
// `generator`, regenerated in backward. sliding_window w (with is_causal) also masks key j when
// i - j >= w, so each query sees at most w keys, itself included: transformers' sliding window
// (masking_utils' sliding_window_overlay keeps kv_idx > q_idx - w); null is full attention.
// softcap c caps each scaled score as c * tanh(s / c) before the mask (Gemma 2's
// attn_logit_softcapping, in transformers' eager order); null is none. `sequences`: the sequences
// packed in each row (Note [Packed sequences in attention]; is_causal and Tq == Tk), a query
// seeing only its own; by default one sequence a row.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal = true, std::optional<double> scale = {},
                                    double dropout_p = 0.0, Generator* generator = nullptr,
                                    std::optional<int64_t> sliding_window = {},
                                    std::optional<double> softcap = {},
                                    const AttentionSequences& sequences = {});

// Note [Attention backward by head groups]
// Backward's workspaces are the fp32 dQ accumulator (FlashAttention-2's dq_accum: dQ sums over
// key tiles, so it is kept in fp32 until the end) and delta, each as large as q (in fp32) and
// lse: at long context the largest tensor of a block's backward (Llama 3.1 8B at 688k tokens:
// 10.5 GiB, twice q itself). Heads are independent, so backward runs over groups of key / value
// heads (with their query heads), each call a view of every tensor, one accumulator the size of
// one group made once: results equal one call's bit for bit (tests/ops). The groups are the
// fewest equal ones whose accumulator stays within kAttentionAccumulatorBytes; with dropout
// (whose masks are drawn by head index) or fp32 q (no accumulator) backward is one call.
inline constexpr int64_t kAttentionAccumulatorBytes = int64_t{256} << 20;
// The key / value heads per backward call for q [B, Hq, T, D] and kv_heads key / value heads.
int64_t attention_backward_kv_heads(const Tensor& q, int64_t kv_heads, bool dropout);
// Sets the accumulator budget on this thread for its scope (tests reach the split at small T).
class AttentionAccumulatorBudget {
 public:
  explicit AttentionAccumulatorBudget(int64_t bytes);
  ~AttentionAccumulatorBudget();
  AttentionAccumulatorBudget(const AttentionAccumulatorBudget&) = delete;
  AttentionAccumulatorBudget& operator=(const AttentionAccumulatorBudget&) = delete;

 private:
  int64_t previous_;
};

}  // namespace headroom
