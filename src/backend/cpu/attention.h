// Flash-attention-2 style attention kernels on the CPU, the CPU's attention table
// (backend/attention_kernels.h): query tiles against key tiles with an online softmax, keeping
// only the per-row log-sum-exp; backward recomputes the probabilities tile by tile. q, k, v and
// the gradients are read and written in their own dtype (f32, bf16, f16); bf16 / f16 tiles are
// widened on the calling thread's stack and results rounded once, as the CUDA kernels load and
// store them, with products and sums in fp32 (cpu::gemm, single-threaded inside our regions).
#pragma once

#include "backend/attention_kernels.h"
#include "backend/dropout_kernels.h"
#include "core/tensor.h"

namespace headroom::cpu {

// AttentionKernels::forward: out contiguous in q's dtype, lse f32 [B, Hq, Tq] = max + log(sum)
// of the undropped, scaled scores of each row. Dropout on the probabilities: element
// (b, h, i, j) is kept when the uniform number of linear index ((b * Hq + h) * Tq + i) * Tk + j
// from (seed, offset) is >= p, then scaled by 1 / (1 - p); see Note [Philox stream layout].
// window (0: none) masks key j <= i - window too, causal only; softcap (0: none) caps the scaled
// scores (backend/attention_kernels.h). sequences: Note [Packed sequences in attention] (the
// default: one sequence a row).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                       int64_t window, float scale, float softcap, DropoutParams dropout,
                       const Tensor& out, const Tensor& lse,
                       const AttentionSequences& sequences = {});

// AttentionKernels::backward: grad_q / grad_k / grad_v written (not accumulated) in q's dtype;
// delta a [B, Hq, Tq] f32 workspace; dQ accumulates in grad_q when q is f32, else in the f32
// workspace grad_q_accum, rounded into grad_q once at the end. Deterministic: no atomics, every
// gradient element is summed in a fixed order.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& grad_out, const Tensor& lse, bool causal, int64_t window,
                        float scale, float softcap, DropoutParams dropout, const Tensor& delta,
                        const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                        const Tensor& grad_q_accum, const AttentionSequences& sequences = {});

}  // namespace headroom::cpu
