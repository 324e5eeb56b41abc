// Softmax kernels: max subtraction for stability, exp from backend/cpu/pointwise_simd.h, sums in
// fp32 (a row's partial sums live in SIMD lanes; the order is fixed, so results repeat). Rows and
// tiles have AVX-512 clones (Note [AVX-512 clones of point-wise loops]).
#include "backend/cpu/softmax.h"

#include <limits>

#include "backend/cpu/pointwise_simd.h"

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

}  // namespace

void softmax_forward(const float* x, float* y, int64_t outer, int64_t n, int64_t inner) {
  for_each_slice(
      outer, n, inner, [&](int64_t begin) { softmax_row(x + begin, y + begin, n); },
      [&](int64_t begin, int64_t len) { softmax_tile(x + begin, y + begin, n, inner, len); });
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t outer, int64_t n,
                      int64_t inner) {
  for_each_slice(
      outer, n, inner,
      [&](int64_t begin) { softmax_row_backward(y + begin, dy + begin, dx + begin, n); },
      [&](int64_t begin, int64_t len) {
        softmax_tile_backward(y + begin, dy + begin, dx + begin, n, inner, len);
      });
}

}  // namespace headroom::cpu
