// The argument checks every backend's cross-entropy entries share
// (backend/cross_entropy_kernels.h).
#include "backend/cross_entropy_kernels.h"

#include "core/error.h"

namespace headroom {

namespace {

// logits (or their gradient) must be [rows, vocab] f32 / bf16 / f16 with a unit column stride.
LogitRows rows_of(const char* op, const char* name, const Tensor& t) {
  if (t.ndim() != 2 || (t.size(1) > 1 && t.stride(1) != 1)) {
    throw ValueError(str_cat(op, ": ", name, " ", t.shape(), " must be 2-D with contiguous rows"));
  }
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f16) {
    throw ValueError(str_cat(op, ": ", name, " is ", dtype_name(t.dtype()),
                             "; the kernels take f32, bf16 or f16"));
  }
  return {t.size(0), t.size(1), t.stride(0)};
}

void check_rows_f32(const char* op, const char* name, const Tensor& t, int64_t rows) {
  if (t.dtype() != DType::f32 || t.numel() != rows || !t.is_contiguous()) {
    throw ValueError(str_cat(op, ": ", name, " must be contiguous f32 [", rows, "], not ",
                             dtype_name(t.dtype()), " ", t.shape()));
  }
}

void check_targets(const char* op, const Tensor& targets, int64_t rows) {
  if (targets.dtype() != DType::i64 && targets.dtype() != DType::i32) {
    throw ValueError(
        str_cat(op, ": targets must be i32 or i64, not ", dtype_name(targets.dtype())));
  }
  if (targets.numel() != rows || !targets.is_contiguous()) {
    throw ValueError(
        str_cat(op, ": targets ", targets.shape(), " must be contiguous [", rows, "]"));
  }
}

}  // namespace

LogitRows check_cross_entropy_forward(const char* op, const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& row_loss) {
  const LogitRows rows = rows_of(op, "logits", logits);
  check_targets(op, targets, rows.rows);
  check_rows_f32(op, "lse", lse, rows.rows);
  check_rows_f32(op, "row_loss", row_loss, rows.rows);
  return rows;
}

LogitRows check_cross_entropy_backward(const char* op, const Tensor& logits, const Tensor& lse,
                                       const Tensor& targets, const Tensor& grad_scale,
                                       const Tensor& grad_logits) {
  const LogitRows rows = rows_of(op, "logits", logits);
  const LogitRows grad_rows = rows_of(op, "grad_logits", grad_logits);
  if (grad_rows.rows != rows.rows || grad_rows.vocab != rows.vocab) {
    throw ValueError(str_cat(op, ": grad_logits ", grad_logits.shape(), " must have the shape ",
                             logits.shape(), " of logits"));
  }
  check_targets(op, targets, rows.rows);
  check_rows_f32(op, "lse", lse, rows.rows);
  if (grad_scale.defined() && grad_scale.numel() != 1) {
    throw ValueError(str_cat(op, ": grad_scale ", grad_scale.shape(), " must hold one element"));
  }
  return rows;
}

void check_mean_loss(const Tensor& row_loss, const Tensor& out) {
  check_rows_f32("mean_loss", "row_loss", row_loss, row_loss.numel());
  if (out.dtype() != DType::f32 || out.numel() != 1) {
    throw ValueError(
        str_cat("mean_loss: out must be one f32, not ", dtype_name(out.dtype()), " ", out.shape()));
  }
}

void check_scale_by_scalar(const Tensor& x, const Tensor& scalar, const Tensor& out) {
  if (out.dtype() != x.dtype() || out.numel() != x.numel() || !x.is_contiguous() ||
      !out.is_contiguous() || scalar.numel() != 1) {
    throw ValueError(str_cat("scale_by_scalar: x ", dtype_name(x.dtype()), " ", x.shape(), ", out ",
                             dtype_name(out.dtype()), " ", out.shape(), ", scalar ", scalar.shape(),
                             ": out must be contiguous like x, scalar 1 element"));
  }
}

}  // namespace headroom
