// The argument checks every backend's gemm entry shares (backend/gemm_kernels.h).
#include "backend/gemm_kernels.h"

#include <algorithm>

#include "core/error.h"

namespace headroom {

namespace {

GemmMatrix matrix_of(const char* name, const Tensor& t) {
  if (t.ndim() != 2 && t.ndim() != 3) {
    throw ValueError(str_cat("gemm: ", name, " ", t.shape(), " must be 2-D or 3-D"));
  }
  GemmMatrix m;
  m.rows = t.size(-2);
  m.cols = t.size(-1);
  if (m.cols > 1 && t.stride(-1) != 1) {
    throw ValueError(str_cat("gemm: ", name, " needs a unit stride in its last dimension, has ",
                             t.strides()));
  }
  // A single row's leading stride is free; the libraries only ask that rows do not overlap.
  m.ld = m.rows > 1 ? t.stride(-2) : std::max<int64_t>(m.cols, 1);
  if (m.ld < std::max<int64_t>(m.cols, 1)) {
    throw ValueError(str_cat("gemm: the rows of ", name, " ", t.shape(), " with strides ",
                             t.strides(), " overlap"));
  }
  if (t.ndim() == 3) {
    m.batch = t.size(0);
    m.batch_stride = m.batch > 1 ? t.stride(0) : 0;
  }
  return m;
}

bool is_gemm_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

}  // namespace

GemmProblem gemm_problem(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b,
                         const Tensor& c, GemmEpilogue epilogue, const Tensor& bias) {
  GemmProblem p;
  p.a = matrix_of("a", a);
  p.b = matrix_of("b", b);
  p.c = matrix_of("c", c);
  p.m = trans_a ? p.a.cols : p.a.rows;
  p.k = trans_a ? p.a.rows : p.a.cols;
  p.n = trans_b ? p.b.rows : p.b.cols;
  const int64_t kb = trans_b ? p.b.cols : p.b.rows;
  if (p.k != kb || p.c.rows != p.m || p.c.cols != p.n) {
    throw ValueError(str_cat("gemm: op(a) of ", a.shape(), " @ op(b) of ", b.shape(), " (",
                             trans_a ? "transposed" : "as is", ", ",
                             trans_b ? "transposed" : "as is", ") does not give c ", c.shape()));
  }
  p.batch = p.c.batch;
  if ((p.a.batch != 1 && p.a.batch != p.batch) || (p.b.batch != 1 && p.b.batch != p.batch)) {
    throw ValueError(str_cat("gemm: batch sizes of a ", a.shape(), " and b ", b.shape(),
                             " do not broadcast to c ", c.shape()));
  }
  if (p.batch > 1 && p.c.batch_stride < p.m * p.c.ld) {
    throw ValueError(str_cat("gemm: the batches of c ", c.shape(), " with strides ", c.strides(),
                             " overlap"));
  }
  if (a.dtype() != b.dtype()) {
    throw ValueError(str_cat("gemm: a is ", dtype_name(a.dtype()), " but b is ",
                             dtype_name(b.dtype()), "; the operands share a dtype"));
  }
  if (!is_gemm_dtype(a.dtype())) {
    throw ValueError(str_cat("gemm: the operands are ", dtype_name(a.dtype()),
                             "; the entry takes f32, bf16 or f16"));
  }
  if (c.dtype() != DType::f32 && c.dtype() != a.dtype()) {
    throw ValueError(str_cat("gemm: c is ", dtype_name(c.dtype()), "; it must be f32 or the ",
                             "operands' ", dtype_name(a.dtype())));
  }
  if (epilogue != GemmEpilogue::none) {
    if (!bias.defined() || bias.ndim() != 1 || bias.size(0) != p.n ||
        (p.n > 1 && bias.stride(0) != 1)) {
      throw ValueError(str_cat("gemm: the epilogue needs a packed bias [", p.n, "]"));
    }
    if (bias.dtype() != DType::f32 && bias.dtype() != c.dtype()) {
      throw ValueError(str_cat("gemm: bias is ", dtype_name(bias.dtype()), "; it must be f32 or ",
                               "c's ", dtype_name(c.dtype())));
    }
  }
  for (const Tensor* t : {&a, &b, &bias}) {
    if (t->defined() && t->device() != c.device()) {
      throw ValueError(str_cat("gemm: tensors on ", t->device(), " and ", c.device()));
    }
  }
  return p;
}

void check_gemm_fp8_bias(const Tensor& c, const Tensor& bias) {
  if (bias.defined() && (bias.dtype() != c.dtype() || bias.dtype() == DType::f32)) {
    throw ValueError(str_cat("gemm_fp8: bias is ", dtype_name(bias.dtype()), " for a ",
                             dtype_name(c.dtype()), " c; it must be c's dtype, bf16 or f16"));
  }
}

}  // namespace headroom
