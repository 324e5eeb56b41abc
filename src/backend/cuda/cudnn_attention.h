// Attention through cuDNN's fused SDPA (the cudnn-frontend graph API), forward and backward, for
// the problems it takes; the CUDA attention kernels (backend/cuda/attention.cu) ask it first and
// run their own kernel when it declines. libcudnn is opened on the first call, not linked (as
// cuBLASLt is: backend/cuda/cublaslt_library.h). Host code only: no CUDA header here.
#pragma once

#include <cstdint>
#include <string>

#include "backend/attention_kernels.h"
#include "backend/dropout_kernels.h"
#include "core/tensor.h"

namespace headroom::cuda {

// Note [Attention through cuDNN]
// cuDNN takes a call only where its result means what the kernel table says:
// - bf16 / f16 (its SDPA has no fp32), without dropout (its masks come from its own generator,
//   not the CPU's Philox stream: Note [Dropout mask]), without softcap, unpacked (cu_seqlens is
//   a ragged layout of another kind), head size a multiple of 8 up to 256;
// - every stride but the head dimension's a multiple of 8 elements and every pointer 16-byte
//   aligned (its kernels load rows of 16 bytes), so q, k and v are read in place from the heads
//   views of a fused projection;
// - causal is its top-left diagonal band with right bound 0, and a window its left bound: a key j
//   is kept when j + window > i, so a query sees `window` keys, itself included, as ours does;
// - its Stats output is our lse: the natural-log logsumexp of the scaled scores, so its forward's
//   out and lse are what our backward reads, and our forward's what its backward reads;
// - the planner stays exact: cuDNN must allocate nothing. Forward runs only where the plan needs
//   no workspace; backward takes the op's workspace pair (Note [Attention backward workspace] in
//   backend/attention_kernels.h), B Hq T (D + 1) floats, exactly its dQ accumulator and its row
//   sums, and declines where the plan asks for more.
// A graph is built once per problem (sizes, strides, dtype, mask, scale, device) and kept; a
// problem cuDNN refuses (its support check or a plan that needs workspace) is remembered as
// refused, so it is asked once. Where libcudnn cannot be opened every call runs our kernel, with
// one warning on stderr. Like our backward, cuDNN's sums dQ with atomics: dQ may differ in its
// last bits from run to run.

// Why cuDNN cannot take this forward problem (a few words), or null when it may: then its own
// support check decides. Reads only shapes, strides, dtypes and addresses (any device).
const char* cudnn_attention_refusal(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, bool causal,
                                    int64_t window, float softcap, const DropoutParams& dropout,
                                    const AttentionSequences& sequences);
// The same for a backward problem: also its output's gradient and the three gradients.
const char* cudnn_attention_backward_refusal(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& grad_out,
                                             const Tensor& lse, const Tensor& grad_q,
                                             const Tensor& grad_k, const Tensor& grad_v,
                                             bool causal, int64_t window, float softcap,
                                             const DropoutParams& dropout,
                                             const AttentionSequences& sequences);

// AttentionKernels::forward / backward through cuDNN on the current stream: true when cuDNN ran
// it, false when it declined and nothing was written (the caller runs its own kernel). Arguments
// checked as the kernel table's entries check them.
bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                             int64_t window, float scale, float softcap,
                             const DropoutParams& dropout, const Tensor& out, const Tensor& lse,
                             const AttentionSequences& sequences);
bool cudnn_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& grad_out, const Tensor& lse, bool causal,
                              int64_t window, float scale, float softcap,
                              const DropoutParams& dropout, const Tensor& delta,
                              const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                              const Tensor& grad_q_accum, const AttentionSequences& sequences);

// The calls cuDNN ran and declined since the process started (all counts).
struct CudnnAttentionStats {
  int64_t forward = 0;
  int64_t backward = 0;
  int64_t forward_declined = 0;
  int64_t backward_declined = 0;
  std::string last_declined;  // why the latest declined call was declined
};
CudnnAttentionStats cudnn_attention_stats();

// Whether the attention kernels ask cuDNN first (default true): off, every call runs our kernel
// (bench/attention_bench.cpp times both).
void set_cudnn_attention_enabled(bool enabled);
bool cudnn_attention_enabled();

// The libcudnn this process uses, opened if need be: loaded, and its path and version ("path,
// cuDNN 9.19.0"), or why it cannot be opened.
struct CudnnLibraryInfo {
  bool loaded = false;
  std::string description;
};
CudnnLibraryInfo cudnn_library_info();

}  // namespace headroom::cuda
