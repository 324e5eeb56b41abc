// oneDNN sgemm behind cpu::gemm.
#include "backend/cpu/gemm.h"

#include <dnnl.h>

#include "core/error.h"

namespace headroom::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    throw Error(str_cat("gemm: oneDNN sgemm failed with status ", static_cast<int>(status),
                        " (m ", m, ", n ", n, ", k ", k, ", lda ", lda, ", ldb ", ldb, ", ldc ",
                        ldc, ")"));
  }
}

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                  float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                  int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                  int64_t stride_c) {
  for (int64_t i = 0; i < batch; ++i) {
    gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
         c + i * stride_c, ldc);
  }
}

}  // namespace headroom::cpu
