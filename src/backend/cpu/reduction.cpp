// Reductions. sum_middle splits over the independent (outer, inner) outputs.
#include "backend/cpu/reduction.h"

#include <vector>

namespace headroom::cpu {

double sum_all(const float* x, int64_t n) {
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (n > (1 << 16)) schedule(static)
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}

void sum_middle(const float* x, int64_t outer, int64_t n, int64_t inner, float* out) {
  if (inner == 1) {
#pragma omp parallel for if (outer * n > (1 << 15)) schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      double s = 0.0;
      const float* row = x + o * n;
      for (int64_t j = 0; j < n; ++j) s += row[j];
      out[o] = static_cast<float>(s);
    }
    return;
  }
  // Columns: split the inner dimension in blocks so each thread owns its outputs.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) if (outer * n * inner > (1 << 15)) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t begin = bi * kBlock;
      const int64_t len = inner - begin < kBlock ? inner - begin : kBlock;
      double acc[kBlock] = {};
      for (int64_t j = 0; j < n; ++j) {
        const float* row = x + (o * n + j) * inner + begin;
        for (int64_t i = 0; i < len; ++i) acc[i] += row[i];
      }
      for (int64_t i = 0; i < len; ++i) out[o * inner + begin + i] = static_cast<float>(acc[i]);
    }
  }
}

}  // namespace headroom::cpu
