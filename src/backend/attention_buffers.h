// The checks every backend's attention kernels (backend/attention_kernels.h) make of the buffers
// the op hands them: the kernels index out, grad_out and the gradients as rows of D at their
// strides, and lse, delta and grad_q_accum as dense rows, so a mis-shaped, mistyped or (for those
// three) strided one would be read or written silently wrong.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/attention_kernels.h"
#include "core/error.h"
#include "core/tensor.h"

namespace headroom {

// ValueError naming the entry, the buffer, and what it must be, unless t is contiguous `dtype`
// of `numel` elements.
inline void check_attention_buffer(const char* entry, const char* name, const Tensor& t,
                                   DType dtype, int64_t numel) {
  if (t.dtype() != dtype || t.numel() != numel || !t.is_contiguous()) {
    throw ValueError(str_cat(entry, ": ", name, " must be contiguous ", dtype_name(dtype), " of ",
                             numel, " elements, not ", dtype_name(t.dtype()), " ", t.shape(),
                             " with strides ", t.strides()));
  }
}

// ValueError naming the entry, the buffer, and what it must be, unless t is `dtype` of `shape`
// with a unit stride in its last dimension.
inline void check_attention_rows(const char* entry, const char* name, const Tensor& t, DType dtype,
                                 const Shape& shape) {
  if (t.dtype() != dtype || t.shape() != shape || (t.size(3) > 1 && t.stride(3) != 1)) {
    throw ValueError(str_cat(entry, ": ", name, " must be ", dtype_name(dtype), " ", shape,
                             " with a unit stride in dim 3, not ", dtype_name(t.dtype()), " ",
                             t.shape(), " with strides ", t.strides()));
  }
}

inline int64_t attention_query_rows(const Tensor& q) { return q.size(0) * q.size(1) * q.size(2); }

// AttentionKernels::forward's out and lse.
inline void check_attention_forward_buffers(const char* entry, const Tensor& q, const Tensor& out,
                                            const Tensor& lse) {
  check_attention_rows(entry, "out", out, q.dtype(), q.shape());
  check_attention_buffer(entry, "lse", lse, DType::f32, attention_query_rows(q));
}

// AttentionKernels::backward's buffers; grad_q_accum is checked when q is not f32.
inline void check_attention_backward_buffers(const char* entry, const Tensor& q, const Tensor& k,
                                             const Tensor& out, const Tensor& grad_out,
                                             const Tensor& lse, const Tensor& delta,
                                             const Tensor& grad_q, const Tensor& grad_k,
                                             const Tensor& grad_v, const Tensor& grad_q_accum) {
  const int64_t rows = attention_query_rows(q);
  check_attention_rows(entry, "out", out, q.dtype(), q.shape());
  check_attention_rows(entry, "grad_out", grad_out, q.dtype(), q.shape());
  check_attention_buffer(entry, "lse", lse, DType::f32, rows);
  check_attention_buffer(entry, "delta", delta, DType::f32, rows);
  check_attention_rows(entry, "grad_q", grad_q, q.dtype(), q.shape());
  check_attention_rows(entry, "grad_k", grad_k, q.dtype(), k.shape());
  check_attention_rows(entry, "grad_v", grad_v, q.dtype(), k.shape());
  if (q.dtype() != DType::f32) {
    if (!grad_q_accum.defined()) {
      throw ValueError(
          str_cat(entry, ": grad_q_accum is required for a ", dtype_name(q.dtype()), " q"));
    }
    check_attention_buffer(entry, "grad_q_accum", grad_q_accum, DType::f32, q.numel());
  }
}

// ValueError naming the entry and the offending value unless `cu` is cu_seqlens of `batch` rows
// of `len` positions (Note [Packed sequences in attention]): 0 first, batch * len last, strictly
// increasing, every row start among them.
inline void check_cu_seqlens(const char* entry, const std::vector<int32_t>& v, int64_t batch,
                             int64_t len) {
  const int64_t total = batch * len;
  if (v.size() < 2 || v.front() != 0 || v.back() != total) {
    throw ValueError(str_cat(entry, ": cu_seqlens must run from 0 to B * T = ", total,
                             ", not from ", v.empty() ? -1 : v.front(), " to ",
                             v.empty() ? -1 : v.back(), " (", v.size(), " values)"));
  }
  int64_t next_row = len;  // the next row start that must appear
  for (size_t n = 1; n < v.size(); ++n) {
    if (v[n] <= v[n - 1]) {
      throw ValueError(str_cat(entry, ": cu_seqlens[", n, "] = ", v[n], " must exceed cu_seqlens[",
                               n - 1, "] = ", v[n - 1]));
    }
    if (v[n] > next_row) {
      throw ValueError(str_cat(entry, ": the sequence at cu_seqlens[", n - 1, "] = ", v[n - 1],
                               " crosses the row boundary ", next_row, " (T = ", len, ")"));
    }
    if (v[n] == next_row) next_row += len;
  }
}

// ValueError naming the entry and the offending value unless `sequences` is undefined or is
// Note [Packed sequences in attention]'s cu_seqlens for q [B, H, T, D] (causal, T keys): int32
// on q's device with its host values, 0 first, B * T last, strictly increasing, every row start
// among them.
inline void check_attention_sequences(const char* entry, const Tensor& q, const Tensor& k,
                                      bool causal, const AttentionSequences& sequences) {
  if (!sequences.packed()) return;
  const int64_t len = q.size(2);
  if (!causal || k.size(2) != len) {
    throw ValueError(str_cat(entry,
                             ": cu_seqlens needs causal attention with as many keys as "
                             "queries, got ",
                             len, " queries and ", k.size(2), " keys"));
  }
  const Tensor& cu = sequences.cu_seqlens;
  const std::vector<int32_t>* host = sequences.host.get();
  if (cu.dtype() != DType::i32 || cu.ndim() != 1 || !cu.is_contiguous() ||
      cu.device() != q.device() || host == nullptr ||
      static_cast<int64_t>(host->size()) != cu.numel()) {
    throw ValueError(str_cat(entry, ": cu_seqlens must be contiguous i32 [N + 1] on ", q.device(),
                             " with its host values, not ", dtype_name(cu.dtype()), " ", cu.shape(),
                             " on ", cu.device()));
  }
  check_cu_seqlens(entry, *host, q.size(0), len);
}

}  // namespace headroom
