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

}  // namespace headroom
