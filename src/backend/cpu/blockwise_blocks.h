// The block loop every blockwise quantizer (8-bit and 4-bit, backend/cpu) starts with. A
// header of its own, for the CPU kernel files only: its OpenMP pragma means nothing to nvcc,
// which compiles the headers the CUDA kernels share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace headroom::cpu {

// Calls fn(b, begin, end, block_max) for each block [begin, end) of `block_size` consecutive
// elements of in[0, n) (the last may be shorter), block_max = max |in| over it, as every
// blockwise quantizer (8-bit and 4-bit) starts. OpenMP over blocks for large n.
template <typename Fn>
void for_each_block(const float* in, int64_t n, int64_t block_size, Fn&& fn) {
  const int64_t blocks = (n + block_size - 1) / block_size;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block_size;
    const int64_t end = std::min(n, begin + block_size);
    float block_max = 0.0f;
    for (int64_t i = begin; i < end; ++i) block_max = std::max(block_max, std::fabs(in[i]));
    fn(b, begin, end, block_max);
  }
}

}  // namespace headroom::cpu
