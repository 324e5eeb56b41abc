// Matrix multiplication on the CPU through oneDNN's sgemm (chosen over OpenBLAS by measurement:
// bench/gemm_bench; it shares our OpenMP threads instead of spinning its own).
#pragma once

#include <cstdint>

namespace headroom::cpu {

// C = alpha * op(A) @ op(B) + beta * C for row-major fp32 matrices; op(A) is M x K, op(B) K x N,
// and op transposes when trans_* is set. Leading dimensions are in elements.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);

// `batch` independent gemms, matrix i at a + i * stride_a (and so on).
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                  float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                  int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                  int64_t stride_c);

}  // namespace headroom::cpu
