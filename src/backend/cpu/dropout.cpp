// Dropout on the Philox stream: a chunk's random words are drawn first (one Philox block per
// four elements, blocks vectorised across SIMD lanes), then applied in a second simple loop; the
// loops have AVX-512 clones (Note [AVX-512 clones of point-wise loops]).
#include "backend/cpu/dropout.h"

#include "backend/cpu/pointwise_simd.h"
#include "core/philox.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kChunk = 1024;  // elements whose words sit on the stack at once; a multiple of 4
constexpr int64_t kGrain = 1 << 14;

// Elements [begin, begin + n) of the array; begin is a multiple of 4, so element begin + i reads
// word i % 4 of block offset + (begin + i) / 4 (Note [Philox stream layout]).
HEADROOM_SIMD_CLONES void dropout_range(const float* x, float* out, int64_t begin, int64_t n,
                                        uint64_t seed, uint64_t offset, uint32_t threshold,
                                        float scale) {
  uint32_t words[kChunk];
  for (int64_t chunk = 0; chunk < n; chunk += kChunk) {
    const int64_t len = n - chunk < kChunk ? n - chunk : kChunk;
    const uint64_t first_block = offset + static_cast<uint64_t>((begin + chunk) / 4);
#pragma omp simd
    for (int64_t b = 0; b < (len + 3) / 4; ++b) {
      const Philox4x32Block block = philox_block(seed, first_block + static_cast<uint64_t>(b));
      words[4 * b] = block.word[0];
      words[4 * b + 1] = block.word[1];
      words[4 * b + 2] = block.word[2];
      words[4 * b + 3] = block.word[3];
    }
    const float* src = x + begin + chunk;
    float* dst = out + begin + chunk;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      dst[i] = src[i] * float_of(bits_of(scale) & mask_if((words[i] >> 8) >= threshold));
    }
  }
}

}  // namespace

void dropout_apply(const float* x, float* out, int64_t n, uint64_t seed, uint64_t offset,
                   uint32_t threshold, float scale) {
  parallel_ranges(n, kGrain, 4, [&](int64_t b, int64_t e) {
    dropout_range(x, out, b, e - b, seed, offset, threshold, scale);
  });
}

}  // namespace headroom::cpu
