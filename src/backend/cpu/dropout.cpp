// Dropout on the Philox stream: a chunk's random words are drawn first (one Philox block per
// four elements, blocks vectorised across SIMD lanes), then applied in a second simple loop; the
// loops have AVX-512 clones (Note [AVX-512 clones of point-wise loops]). The CPU's dropout table
// entry (backend/dropout_kernels.h): f32 tensors in place, bf16 / f16 ones widened a chunk at a
// time into the thread's scratch and rounded once on store, as the CUDA kernel loads and stores
// them; see Note [Dropout mask] in ops/dropout.cpp.
#include <algorithm>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/pointwise_simd.h"
#include "backend/cpu/widen_rows.h"
#include "backend/dropout_kernels.h"
#include "core/philox.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kChunk = 1024;  // elements whose words sit on the stack at once; a multiple of 4
constexpr int64_t kGrain = 1 << 14;

// Elements [begin, begin + n) of the tensor, x and out pointing at element begin; begin is a
// multiple of 4, so element begin + i reads word i % 4 of block offset + (begin + i) / 4 (Note
// [Philox stream layout]).
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
    const float* src = x + chunk;
    float* dst = out + chunk;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      dst[i] = src[i] * float_of(bits_of(scale) & mask_if((words[i] >> 8) >= threshold));
    }
  }
}

// out[i] = keep(i) ? x[i] * scale : 0, where keep(i) holds when the 24-bit uniform word of
// element i of the Philox draw (seed, offset) is >= threshold. Forward applies it to x, backward
// to the gradient, with the same arguments.
void dropout_apply(const Tensor& x, uint64_t seed, uint64_t offset, uint32_t threshold, float scale,
                   const Tensor& out) {
  ensure_flush_denormal();
  parallel_ranges(x.numel(), kGrain, 4, [&](int64_t b, int64_t e) {
    if (x.dtype() == DType::f32 && out.dtype() == DType::f32) {
      dropout_range(x.data<float>() + b, out.data<float>() + b, b, e - b, seed, offset, threshold,
                    scale);
      return;
    }
    float* scratch = thread_scratch(2 * kChunk);
    for (int64_t c = b; c < e; c += kChunk) {  // c stays a multiple of 4
      const int64_t m = std::min(kChunk, e - c);
      float* target = span_target(out, c, scratch + kChunk);
      dropout_range(widen_span(x, c, m, scratch), target, c, m, seed, offset, threshold, scale);
      store_span(out, c, m, target);
    }
  });
}

// out = residual + (x's dropout rounded to x's dtype): a chunk of x widened, masked, rounded
// and widened back (a no-op for f32), the residual added, the sum rounded into out.
void dropout_apply_add(const Tensor& x, const Tensor& residual, uint64_t seed, uint64_t offset,
                       uint32_t threshold, float scale, const Tensor& out) {
  ensure_flush_denormal();
  parallel_ranges(x.numel(), kGrain, 4, [&](int64_t b, int64_t e) {
    // [0, k): x widened, then the sum; [k, 2k): the dropped x; [2k, 3k): the residual widened;
    // [3k, 4k): the dropped x in x's dtype.
    float* scratch = thread_scratch(4 * kChunk);
    float* dropped = scratch + kChunk;
    for (int64_t c = b; c < e; c += kChunk) {  // c stays a multiple of 4
      const int64_t m = std::min(kChunk, e - c);
      const auto n = static_cast<size_t>(m);
      dropout_range(widen_span(x, c, m, scratch), dropped, c, m, seed, offset, threshold, scale);
      if (x.dtype() != DType::f32) {
        convert_from_f32(dropped, scratch + 3 * kChunk, x.dtype(), n);
        convert_to_f32(scratch + 3 * kChunk, x.dtype(), dropped, n);
      }
      const float* r = widen_span(residual, c, m, scratch + 2 * kChunk);
      float* sum = span_target(out, c, scratch);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) sum[i] = r[i] + dropped[i];
      store_span(out, c, m, sum);
    }
  });
}

}  // namespace

void fill_dropout_kernels(DropoutKernels& kernels) {
  kernels.apply = dropout_apply;
  kernels.apply_add = dropout_apply_add;
}

}  // namespace headroom::cpu
