// The argument checks every backend's gemm entry shares, and the census's cost of a call
// (backend/gemm_kernels.h).
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
    throw ValueError(
        str_cat("gemm: ", name, " needs a unit stride in its last dimension, has ", t.strides()));
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
                         const Tensor& c, GemmEpilogue epilogue, const Tensor& bias, float alpha) {
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
    throw ValueError(
        str_cat("gemm: the batches of c ", c.shape(), " with strides ", c.strides(), " overlap"));
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
  if (is_bias_grad(epilogue)) {
    const bool of_a = epilogue == GemmEpilogue::bias_grad_a;
    const Tensor& reduced = of_a ? a : b;
    const GemmMatrix& mr = of_a ? p.a : p.b;
    if ((of_a ? !trans_a : trans_b) || p.batch != 1 || mr.batch != 1 ||
        (mr.rows > 1 && mr.ld != mr.cols) || alpha != 1.0f) {
      throw ValueError(str_cat("gemm: a bias gradient of op(", of_a ? "a" : "b",
                               ") needs one matrix stored [k, ", of_a ? "m" : "n", "] packed (got ",
                               reduced.shape(), " with strides ", reduced.strides(), ", ",
                               of_a ? "trans_a " : "trans_b ", of_a ? trans_a : trans_b,
                               ") and alpha 1 (got ", alpha, ")"));
    }
  }
  if (epilogue != GemmEpilogue::none) {
    const int64_t length = epilogue == GemmEpilogue::bias_grad_a ? p.m : p.n;
    if (!bias.defined() || bias.ndim() != 1 || bias.size(0) != length ||
        (length > 1 && bias.stride(0) != 1)) {
      throw ValueError(str_cat("gemm: the epilogue needs a packed bias [", length, "]"));
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

namespace {

int64_t bytes_of(const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

std::string gemm_shape(const GemmProblem& p, const char* epilogue, bool accumulates) {
  return str_cat(p.batch > 1 ? str_cat(p.batch, " x ") : std::string(), p.m, " x ", p.n, " x ", p.k,
                 epilogue, accumulates ? " +=" : "");
}

}  // namespace

KernelWork gemm_cost(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, float alpha,
                     float beta, const Tensor& c, GemmEpilogue epilogue, const Tensor& bias) {
  const GemmProblem p = gemm_problem(trans_a, trans_b, a, b, c, epilogue, bias, alpha);
  KernelWork w;
  w.flops = 2.0 * static_cast<double>(p.batch) * static_cast<double>(p.m) *
            static_cast<double>(p.n) * static_cast<double>(p.k);
  w.precision = a.dtype() == DType::f32 ? FlopPrecision::fp32 : FlopPrecision::sixteen_bit;
  w.bytes = bytes_of(a) + bytes_of(b) + bytes_of(c) * (beta != 0.0f ? 2 : 1) + bytes_of(bias);
  const char* names[] = {"", " +bias", " +bias+gelu", " +dbias", " +dbias"};
  w.shape = gemm_shape(p, names[static_cast<int>(epilogue)], beta != 0.0f);
  return w;
}

KernelWork gemm_fp8_cost(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                         const Tensor& b_scale_inv, const Tensor& c, const Tensor& bias) {
  KernelWork w;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  w.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  w.precision = FlopPrecision::fp8;
  w.bytes = bytes_of(a) + bytes_of(a_scale_inv) + bytes_of(b) + bytes_of(b_scale_inv) +
            bytes_of(c) + bytes_of(bias);
  w.shape = str_cat(m, " x ", n, " x ", k, " fp8", bias.defined() ? " +bias" : "");
  return w;
}

}  // namespace headroom
