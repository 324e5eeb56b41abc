// Row-parallel loops for the norm and loss kernels, each compiled twice: for AVX-512 (chosen at
// run time, as the build sets no -march) and for the baseline ISA.
//
// The row body is a lambda marked HEADROOM_ROW_INLINE; it is inlined into a target("avx512f")
// loop, so its `#pragma omp simd` loops vectorise 16 floats wide there.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype_convert.h"

#define HEADROOM_ROW_INLINE __attribute__((always_inline))

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HEADROOM_ROWS_AVX512 1
#define HEADROOM_ROWS_AVX512_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#else
#define HEADROOM_ROWS_AVX512 0
#endif

namespace headroom::cpu {

namespace rows_detail {

template <typename Body>
void run_baseline(const Body& body, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) body(i);
}

#if HEADROOM_ROWS_AVX512
template <typename Body>
HEADROOM_ROWS_AVX512_TARGET void run_avx512(const Body& body, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) body(i);
}
#endif

inline bool use_avx512() {
#if HEADROOM_ROWS_AVX512
  static const bool wide = cpu_isa_best() == CpuIsa::avx512;
  return wide;
#else
  return false;
#endif
}

}  // namespace rows_detail

// Runs body(i) for i in [0, count), in `count` OpenMP iterations (static schedule) when `work`
// (about the number of floats touched) is large enough to pay for the threads.
template <typename Body>
void for_each_row(int64_t count, int64_t work, const Body& body) {
  const bool wide = rows_detail::use_avx512();
  // Blocks of rows per call keep the dispatch out of the per-row cost.
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(16, count / 64));
  const int64_t blocks = (count + block - 1) / block;
#pragma omp parallel for schedule(static) if (work > (1 << 15) && blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block, end = std::min(count, begin + block);
#if HEADROOM_ROWS_AVX512
    if (wide) {
      rows_detail::run_avx512(body, begin, end);
      continue;
    }
#endif
    rows_detail::run_baseline(body, begin, end);
  }
}

}  // namespace headroom::cpu
