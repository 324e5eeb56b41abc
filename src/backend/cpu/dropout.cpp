// Dropout on the Philox stream: a chunk's random words are drawn first (one Philox block per
// four elements, blocks vectorised across SIMD lanes), then applied in a second simple loop.
#include "backend/cpu/dropout.h"

#include "backend/cpu/pointwise_math.h"
#include "core/philox.h"

namespace headroom::cpu {

namespace {
constexpr int64_t kChunk = 1024;  // elements per task; a multiple of 4 so chunks start a block
constexpr int64_t kGrain = 1 << 14;
}  // namespace

void dropout_apply(const float* x, float* out, int64_t n, uint64_t seed, uint64_t offset,
                   uint32_t threshold, float scale) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n > kGrain) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    const int64_t len = n - begin < kChunk ? n - begin : kChunk;
    const uint64_t first_block = offset + static_cast<uint64_t>(begin / 4);
    uint32_t words[kChunk];
#pragma omp simd
    for (int64_t b = 0; b < (len + 3) / 4; ++b) {
      const Philox4x32Block block = philox_block(seed, first_block + static_cast<uint64_t>(b));
      words[4 * b] = block.word[0];
      words[4 * b + 1] = block.word[1];
      words[4 * b + 2] = block.word[2];
      words[4 * b + 3] = block.word[3];
    }
    const float* src = x + begin;
    float* dst = out + begin;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      dst[i] = src[i] * float_of(bits_of(scale) & mask_if((words[i] >> 8) >= threshold));
    }
  }
}

}  // namespace headroom::cpu
