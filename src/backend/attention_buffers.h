// The checks every backend's attention kernels (backend/attention_kernels.h) make of the buffers
// the op hands them: the kernels index out, grad_out and the gradients as rows of D at their
// strides, and lse, delta and grad_q_accum as dense rows, so a mis-shaped, mistyped or (for those
// three) strided one would be read or written silently wrong.
#pragma once

#include <cstdint>

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

}  // namespace headroom
