// The GEMM family's kernel table (Note [Kernel tables] in backend/kernel_table.h): matrix products
// for linear, the chunked logits of linear_cross_entropy and attention-free matmuls.
#pragma once

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// What a GEMM adds to alpha * op(a) @ op(b) + beta * c before it stores c (bias, bias_gelu), or
// writes beside it: the bias gradient, bias[i] = sum over k of op(a)[i, k] (bias_grad_a, [m]) or
// bias[j] = sum over k of op(b)[k, j] (bias_grad_b, [n]), which is a linear's db next to its dW
// (cuBLASLt's BGRADB and BGRADA: their A is our b).
enum class GemmEpilogue { none, bias, bias_gelu, bias_grad_a, bias_grad_b };

inline bool is_bias_grad(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::bias_grad_a || epilogue == GemmEpilogue::bias_grad_b;
}

// The kernel census's figures for a call (Note [Kernel costs]): 2 m n k FLOPs a matrix, A, B and
// the bias read, C written (and read when beta is not 0).
KernelWork gemm_cost(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, float alpha,
                     float beta, const Tensor& c, GemmEpilogue epilogue, const Tensor& bias);
KernelWork gemm_fp8_cost(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                         const Tensor& b_scale_inv, const Tensor& c, const Tensor& bias);

struct GemmKernels {
  static constexpr const char* kName = "gemm";

  // c = alpha * op(a) @ op(b) + beta * c, then the epilogue (bias: + bias[col], bias_gelu: gelu of
  // that). a, b, c are 2-D, or 3-D with a leading batch dimension (a or b may have batch stride 0);
  // each has a unit stride in its last dimension and any leading stride. a and b share a dtype
  // (f32, bf16 or f16; f32 runs without TF32); c is f32 or their dtype; bias is f32 or c's
  // dtype. k is at least 1 (the op fills c for an empty inner dimension). A workspace, when
  // needed, comes from the device's caching allocator. The bias gradients are written (summed in
  // fp32 or wider, rounded once) for one matrix, alpha 1, and a reduced operand stored [k, m] or
  // [k, n] packed: op(a) = a^T for bias_grad_a, op(b) = b for bias_grad_b, as a linear's
  // dW = g^T x ([out, in] weights) and x^T g ([in, out]) have them.
  Kernel<void(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, float alpha, float beta,
              const Tensor& c, GemmEpilogue epilogue, const Tensor& bias)>
      gemm{"gemm", nullptr, gemm_cost};
  // The FP8 GEMM in the one layout cuBLASLt's FP8 kernels take (TN, see REFERENCES.md):
  // c [m, n] = (a_scale_inv * b_scale_inv) * a [m, k] @ b [n, k]^T (+ bias [n]). a and b are
  // contiguous f8_e4m3fn / f8_e5m2 (not both e5m2), their scale_inv f32 [1] on the device (read
  // there, never copied to the host); c contiguous f32, bf16 or f16; bias bf16 / f16 of c's
  // dtype, or undefined (cuBLASLt's FP8 kernels take no f32 bias, and compute D's amax only for an
  // FP8 D, which headroom never writes: an f32 c gets its bias added afterwards by the caller).
  // On the CPU every FP8 value is widened exactly and the products summed in fp32 (gemm's
  // sgemm), then scaled once; Hopper's FP8 tensor cores accumulate in fewer bits (Note [CUDA op
  // tolerances]). k is at least 1.
  Kernel<void(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
              const Tensor& b_scale_inv, const Tensor& c, const Tensor& bias)>
      gemm_fp8{"gemm_fp8", nullptr, gemm_fp8_cost};
};

// One operand of a gemm entry: `batch` (1, or the product's) row-major rows x cols matrices, rows
// ld elements apart and matrices batch_stride apart (0: one matrix shared by the batch).
struct GemmMatrix {
  int64_t batch = 1;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// A gemm call's operands and sizes: op(a) is m x k, op(b) k x n, c batch x m x n.
struct GemmProblem {
  GemmMatrix a, b, c;
  int64_t m = 0, n = 0, k = 0, batch = 1;
};

// What every backend's gemm entry requires of its arguments (shapes, strides, dtypes, devices,
// the epilogue's bias), checked once for all: the problem, or ValueError naming the argument.
GemmProblem gemm_problem(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b,
                         const Tensor& c, GemmEpilogue epilogue, const Tensor& bias, float alpha);

// What every backend's gemm_fp8 entry requires of its bias: undefined, or bf16 / f16 of c's
// dtype (cuBLASLt's FP8 kernels take no f32 bias); ValueError otherwise.
void check_gemm_fp8_bias(const Tensor& c, const Tensor& bias);

}  // namespace headroom
