// The attention's kernel table (Note [Kernel tables] in backend/kernel_table.h): q [B, Hq, T, D], k
// / v [B, Hkv, S, D], one dtype; Hq is a multiple of Hkv (GQA). q, k, v, the output, its gradient
// and the three gradients are read and written at any strides with a unit stride in D (the
// [B, T, H, D] layout of the projections needs no transposed copies).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/dropout_kernels.h"
#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// Note [Packed sequences in attention]
// Several sequences may share a batch row (packing; TRL's padding-free batches). Their
// boundaries are flash-attention's varlen cu_seqlens over the flattened [B * T] positions: int32
// [N + 1], 0 first, B * T last, strictly increasing, every row start b * T among them (no
// sequence crosses a row). A query sees only keys of its own sequence (causal within it, and the
// window within that); no T x T mask exists, and key tiles outside a query tile's sequence are
// never visited. The CPU kernels start their tiles at each sequence's first token, so a
// sequence's outputs and gradients are those of the sequence run alone, in the same order of
// sums. An undefined cu_seqlens is one sequence a row, the unpacked batch, which costs nothing
// extra.
struct AttentionSequences {
  Tensor cu_seqlens;  // int32 [N + 1] on q's device; undefined: one sequence a row
  // The same values on the host, for the checks, the census's costs and the CPU kernels (the
  // meta device's cu_seqlens has none).
  std::shared_ptr<const std::vector<int32_t>> host;
  bool packed() const { return cu_seqlens.defined(); }
};

// Note [Attention backward workspace]
// For a q in bf16 or f16, backward's two workspaces are one allocation of the op's
// (ops/attention.cpp): grad_q_accum's B Hq T D floats, then delta's B Hq T, each a contiguous view
// of it. A kernel that finds them so (adjacent, one storage) may take the pair as one workspace
// of B Hq T (D + 1) floats: cuDNN's SDPA backward asks for exactly that much (its fp32 dQ
// accumulator and its row sums of dO * O) and, handed it, allocates nothing, so every device, the
// meta device included, allocates the same bytes whichever kernel runs
// (backend/cuda/cudnn_attention.h). For an f32 q delta is the only workspace.

// The kernel census's figures (Note [Kernel costs]): forward 4 B Hq T S D FLOPs (scores and
// values), backward 2.5 times that (FlashAttention-2's count: the scores again, then dV, dP, dQ,
// dK), half of each when causal, the visible share of the T x S pairs with a window, summed over
// the sequences when packed; the tensors' bytes.
KernelWork attention_forward_cost(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                  int64_t window, float scale, float softcap, DropoutParams dropout,
                                  const Tensor& out, const Tensor& lse,
                                  const AttentionSequences& sequences);
KernelWork attention_backward_cost(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                                   bool causal, int64_t window, float scale, float softcap,
                                   DropoutParams dropout, const Tensor& delta, const Tensor& grad_q,
                                   const Tensor& grad_k, const Tensor& grad_v,
                                   const Tensor& grad_q_accum, const AttentionSequences& sequences);

// causal masks key j > query i; window (causal only; 0: none) also masks key j <= i - window, so
// that a query sees `window` keys, itself included (transformers' sliding window). Key tiles that
// a query tile cannot see are skipped. softcap c > 0 caps each scaled score s as c * tanh(s / c)
// before the mask and the softmax (Gemma 2's attn_logit_softcapping); backward multiplies dS by
// its derivative 1 - tanh^2, recomputed from the score. 0: no cap. `sequences` (last): Note
// [Packed sequences in attention]; packed needs causal and T == S.
struct AttentionKernels {
  static constexpr const char* kName = "attention";

  // out in q's dtype, q's shape; lse f32 [B, Hq, T] contiguous.
  Kernel<void(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, int64_t window,
              float scale, float softcap, DropoutParams dropout, const Tensor& out,
              const Tensor& lse, const AttentionSequences& sequences)>
      forward{"forward", nullptr, attention_forward_cost};
  // out (forward's) and grad_out in q's dtype, q's shape; lse as forward's; delta: f32
  // [B, Hq, T] workspace; grad_q / grad_k / grad_v in q's dtype, shaped as q / k / v;
  // grad_q_accum: contiguous f32 [B, Hq, T, D] workspace when q is not f32, else undefined
  // (Note [Attention backward workspace]).
  Kernel<void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& grad_out, const Tensor& lse, bool causal, int64_t window, float scale,
              float softcap, DropoutParams dropout, const Tensor& delta, const Tensor& grad_q,
              const Tensor& grad_k, const Tensor& grad_v, const Tensor& grad_q_accum,
              const AttentionSequences& sequences)>
      backward{"backward", nullptr, attention_backward_cost};
};

}  // namespace headroom
