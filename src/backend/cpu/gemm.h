// Matrix multiplication on the CPU through oneDNN's sgemm (chosen over OpenBLAS by measurement:
// bench/gemm_bench; it shares our OpenMP threads instead of spinning its own).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/float_formats.h"

namespace headroom::cpu {

// C = alpha * op(A) @ op(B) + beta * C for row-major fp32 matrices; op(A) is M x K, op(B) K x N,
// and op transposes when trans_* is set. Leading dimensions are in elements.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// `batch` independent gemms, matrix i at a + i * stride_a (and so on).
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                  float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                  int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                  int64_t stride_c);

// bf16 GEMM on the CPU's bf16 instructions (AVX512_BF16 / AMX through oneDNN's matmul primitive):
// C = alpha * op(A) @ op(B) + beta * C + bias, A and B bf16, products and sums in fp32, C either
// fp32 (c_dtype f32) or bf16 (c_dtype bf16: the fp32 result rounded to nearest even once, as a
// GPU's bf16 GEMM writes it). `bias` (fp32, length n, added to every row) may be null. Row-major,
// leading dimensions in elements, as gemm.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, void* c,
               DType c_dtype, int64_t ldc, const float* bias = nullptr);

// `batch` independent bf16 gemms, matrix i at a + i * stride_a (and so on); no bias.
void gemm_bf16_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                       float alpha, const BFloat16* a, int64_t lda, int64_t stride_a,
                       const BFloat16* b, int64_t ldb, int64_t stride_b, float beta, void* c,
                       DType c_dtype, int64_t ldc, int64_t stride_c);

// The kernel of the calling thread's last gemm_bf16 or gemm_bf16_batched that computed anything:
// oneDNN's implementation name ("brg:avx512_core_bf16", "brg:avx512_core_amx_bf16": the CPU's
// bf16 instructions), or "widened" for the fp32 fallback; "" before the first. Strided operands
// are copied to dense ones first, so this is the dense kernel's name. See Note [bf16 GEMM on
// oneDNN's matmul primitive].
std::string gemm_bf16_last_kernel();

}  // namespace headroom::cpu
