// The CPU's softmax kernels (backend/softmax_kernels.h) over the middle dimension of
// [outer, n, inner]: inner == 1 is the last-dimension case (contiguous rows); otherwise columns
// are processed in tiles of contiguous inner elements, so no transpose is ever materialised. Max
// subtraction for stability, exp from backend/cpu/pointwise_simd.h, sums in fp32 (a row's
// partial sums live in SIMD lanes; the order is fixed, so results repeat). Rows and tiles have
// AVX-512 clones (Note [AVX-512 clones of point-wise loops]). f32 tensors are used in place;
// bf16 / f16 rows and tiles are widened into the thread's scratch as they are read and rounded
// once as they are written, as the CUDA kernels load and store them.
#include <cstring>
#include <limits>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/pointwise_simd.h"
#include "backend/cpu/widen_rows.h"
#include "backend/softmax_kernels.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kGrain = 1 << 15;  // elements below which one thread does all
constexpr int64_t kTile = 256;       // inner columns per task when softmax is not over the last dim

HEADROOM_SIMD_CLONES void softmax_row(const float* x, float* y, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = m > x[j] ? m : x[j];
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < n; ++j) {
    const float e = exp_approx(x[j] - m);
    y[j] = e;
    total += e;
  }
  const float inv = 1.0f / total;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] *= inv;
}

HEADROOM_SIMD_CLONES void softmax_row_backward(const float* y, const float* dy, float* dx,
                                               int64_t n) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}

// Columns [0, len) of one outer slice; consecutive j are `inner` floats apart.
HEADROOM_SIMD_CLONES void softmax_tile(const float* x, float* y, int64_t n, int64_t inner,
                                       int64_t len) {
  float m[kTile], total[kTile];
  for (int64_t i = 0; i < len; ++i) {
    m[i] = -std::numeric_limits<float>::infinity();
    total[i] = 0.0f;
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* row = x + j * inner;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) m[i] = m[i] > row[i] ? m[i] : row[i];
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* row = x + j * inner;
    float* out = y + j * inner;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      const float e = exp_approx(row[i] - m[i]);
      out[i] = e;
      total[i] += e;
    }
  }
  for (int64_t i = 0; i < len; ++i) total[i] = 1.0f / total[i];
  for (int64_t j = 0; j < n; ++j) {
    float* out = y + j * inner;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) out[i] *= total[i];
  }
}

HEADROOM_SIMD_CLONES void softmax_tile_backward(const float* y, const float* dy, float* dx,
                                                int64_t n, int64_t inner, int64_t len) {
  float dot[kTile] = {};
  for (int64_t j = 0; j < n; ++j) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) dot[i] += dy[j * inner + i] * y[j * inner + i];
  }
  for (int64_t j = 0; j < n; ++j) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      dx[j * inner + i] = y[j * inner + i] * (dy[j * inner + i] - dot[i]);
    }
  }
}

// Calls row(offset) for each row when inner == 1, else tile(offset, len) for each tile of up to
// kTile columns of each outer slice; offsets are of the slice's first element.
template <typename Row, typename Tile>
void for_each_slice(int64_t outer, int64_t n, int64_t inner, Row row, Tile tile) {
  const bool parallel = outer * n * inner > kGrain;
  if (inner == 1) {
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t o = 0; o < outer; ++o) row(o * n);
    return;
  }
  const int64_t tiles = (inner + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) if (parallel) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t t = 0; t < tiles; ++t) {
      tile(o * n * inner + t * kTile, inner - t * kTile < kTile ? inner - t * kTile : kTile);
    }
  }
}

// Rows j in [0, n) of a tile, `len` elements each at begin + j * inner, gathered into buf
// [n, len] as fp32; and scattered back, rounded once.
void gather_tile(const Tensor& t, int64_t begin, int64_t n, int64_t inner, int64_t len,
                 float* buf) {
  for (int64_t j = 0; j < n; ++j) {
    const float* row = widen_span(t, begin + j * inner, len, buf + j * len);
    if (row != buf + j * len) std::memcpy(buf + j * len, row, sizeof(float) * len);
  }
}

void scatter_tile(const Tensor& t, int64_t begin, int64_t n, int64_t inner, int64_t len,
                  float* buf) {
  for (int64_t j = 0; j < n; ++j) {
    float* target = span_target(t, begin + j * inner, buf + j * len);
    if (target != buf + j * len) std::memcpy(target, buf + j * len, sizeof(float) * len);
    store_span(t, begin + j * inner, len, buf + j * len);
  }
}

bool all_f32(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->dtype() != DType::f32) return false;
  }
  return true;
}

void softmax_forward(const Tensor& x, int64_t outer, int64_t n, int64_t inner, const Tensor& out) {
  ensure_flush_denormal();
  if (all_f32({&x, &out})) {
    const float* xp = x.data<float>();
    float* yp = out.data<float>();
    for_each_slice(
        outer, n, inner, [&](int64_t begin) { softmax_row(xp + begin, yp + begin, n); },
        [&](int64_t begin, int64_t len) { softmax_tile(xp + begin, yp + begin, n, inner, len); });
    return;
  }
  for_each_slice(
      outer, n, inner,
      [&](int64_t begin) {
        float* scratch = thread_scratch(2 * n);
        const float* xr = widen_span(x, begin, n, scratch);
        float* yr = span_target(out, begin, scratch + n);
        softmax_row(xr, yr, n);
        store_span(out, begin, n, yr);
      },
      [&](int64_t begin, int64_t len) {
        float* scratch = thread_scratch(2 * n * len);
        gather_tile(x, begin, n, inner, len, scratch);
        softmax_tile(scratch, scratch + n * len, n, len, len);
        scatter_tile(out, begin, n, inner, len, scratch + n * len);
      });
}

// dx = y * (dy - sum_n(dy * y))
void softmax_backward(const Tensor& y, const Tensor& dy, int64_t outer, int64_t n, int64_t inner,
                      const Tensor& dx) {
  ensure_flush_denormal();
  if (all_f32({&y, &dy, &dx})) {
    const float* yp = y.data<float>();
    const float* gp = dy.data<float>();
    float* dp = dx.data<float>();
    for_each_slice(
        outer, n, inner,
        [&](int64_t begin) { softmax_row_backward(yp + begin, gp + begin, dp + begin, n); },
        [&](int64_t begin, int64_t len) {
          softmax_tile_backward(yp + begin, gp + begin, dp + begin, n, inner, len);
        });
    return;
  }
  for_each_slice(
      outer, n, inner,
      [&](int64_t begin) {
        float* scratch = thread_scratch(3 * n);
        const float* yr = widen_span(y, begin, n, scratch);
        const float* gr = widen_span(dy, begin, n, scratch + n);
        float* dr = span_target(dx, begin, scratch + 2 * n);
        softmax_row_backward(yr, gr, dr, n);
        store_span(dx, begin, n, dr);
      },
      [&](int64_t begin, int64_t len) {
        float* scratch = thread_scratch(3 * n * len);
        gather_tile(y, begin, n, inner, len, scratch);
        gather_tile(dy, begin, n, inner, len, scratch + n * len);
        softmax_tile_backward(scratch, scratch + n * len, scratch + 2 * n * len, n, len, len);
        scatter_tile(dx, begin, n, inner, len, scratch + 2 * n * len);
      });
}

}  // namespace

void fill_softmax_kernels(SoftmaxKernels& kernels) {
  kernels.forward = softmax_forward;
  kernels.backward = softmax_backward;
}

}  // namespace headroom::cpu
