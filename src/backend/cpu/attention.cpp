// Flash-attention-2 on the CPU. Work items own their outputs (a query tile in forward; a key/value
// head, or one of its key tiles, in backward), so no two threads write one element and every sum
// runs in a fixed order: results repeat bit for bit.
#include "backend/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/gemm.h"
#include "backend/exp_approx.h"
#include "core/philox.h"

namespace headroom::cpu {

namespace {

// Tile shapes (rows = queries, columns = keys), by measurement on B 8, H 6, T 256, D 64
// (bench/attention_bench): oneDNN's sgemm runs a 64^3 product at about half the rate of a
// 64 x 256 x 64 one, so forward takes 64 queries against up to 256 keys at once, and backward
// 64 keys (one thread's dK / dV rows) against up to 256 queries. The score and dP tiles
// (64 KiB each) are per-thread stack buffers. cpu::gemm runs single-threaded here (our regions
// are the active level; nested ones get one thread) and ran a 64^3 product 10x faster or more
// than loops GCC vectorises without -march (SSE2, no FMA), so the products stay on it.
constexpr int64_t kForwardRows = 64;
constexpr int64_t kForwardKeys = 256;
constexpr int64_t kBackwardRows = 256;
constexpr int64_t kBackwardKeys = 64;

// Below this many multiply-adds of QK^T a call stays on one thread.
constexpr int64_t kParallelWork = int64_t{1} << 18;

// Floats mapped to int32 in the same order (NaN aside), so that a row maximum is an integer
// reduction, which GCC vectorises; a float max is a branch to it (Note
// [Selects through integer masks] in backend/exp_approx.h).
inline int32_t order_key(float x) {
  int32_t i;
  std::memcpy(&i, &x, sizeof i);
  return i ^ ((i >> 31) & 0x7FFFFFFF);
}

inline float from_order_key(int32_t key) {
  const int32_t i = key ^ ((key >> 31) & 0x7FFFFFFF);
  float x;
  std::memcpy(&x, &i, sizeof x);
  return x;
}

float row_max(const float* x, int64_t n, float init) {
  int32_t best = order_key(init);
#pragma omp simd reduction(max : best)
  for (int64_t c = 0; c < n; ++c) best = std::max(best, order_key(x[c]));
  return from_order_key(best);
}

// Scale (1 / (1 - p)) or 0 for `n` consecutive probabilities from linear index `first`.
void dropout_scales(const AttentionDropout& dropout, uint64_t first, int64_t n, float* out) {
  const float keep_scale = 1.0f / (1.0f - dropout.p);
  int64_t c = 0;
  while (c < n) {
    const uint64_t index = first + static_cast<uint64_t>(c);
    const Philox4x32Block block = philox_block(dropout.seed, dropout.offset + index / 4);
    for (uint64_t w = index % 4; w < 4 && c < n; ++w, ++c) {
      out[c] = philox_uniform01(block.word[w]) >= dropout.p ? keep_scale : 0.0f;
    }
  }
}

// Keys [j0, j0 + bc) that row i may see: all, or those up to the diagonal when causal.
inline int64_t visible_keys(const AttentionProblem& pb, int64_t i, int64_t j0, int64_t bc) {
  return pb.causal ? std::clamp<int64_t>(i - j0 + 1, 0, bc) : bc;
}

inline uint64_t linear_index(const AttentionDims& d, int64_t b, int64_t h, int64_t i, int64_t j) {
  return static_cast<uint64_t>(((b * d.q_heads + h) * d.q_len + i) * d.kv_len + j);
}

const float* tile_of(const AttentionOperand& x, int64_t b, int64_t h, int64_t row) {
  return x.data + b * x.batch_stride + h * x.head_stride + row * x.row_stride;
}

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// One query tile of one head: O and lse for rows [i0, i0 + br).
void forward_tile(const AttentionProblem& pb, int64_t b, int64_t h, int64_t i0, float* out,
                  float* lse) {
  const AttentionDims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t br = std::min(kForwardRows, d.q_len - i0);
  const int64_t kvh = h / (d.q_heads / d.kv_heads);
  const float* q = tile_of(pb.q, b, h, i0);
  float* o = out + ((b * d.q_heads + h) * d.q_len + i0) * dim;
  float* row_lse = lse + (b * d.q_heads + h) * d.q_len + i0;
  alignas(64) float s[kForwardRows * kForwardKeys];
  alignas(64) float keep[kForwardKeys];
  float m[kForwardRows], l[kForwardRows];
  for (int64_t r = 0; r < br; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0.0f;
  }
  std::fill(o, o + br * dim, 0.0f);
  const int64_t key_end = pb.causal ? std::min(d.kv_len, i0 + br) : d.kv_len;
  for (int64_t j0 = 0; j0 < key_end; j0 += kForwardKeys) {
    const int64_t bc = std::min(kForwardKeys, key_end - j0);
    const float* k = tile_of(pb.k, b, kvh, j0);
    const float* v = tile_of(pb.v, b, kvh, j0);
    gemm(false, true, br, bc, dim, pb.scale, q, pb.q.row_stride, k, pb.k.row_stride, 0.0f, s,
         kForwardKeys);
    for (int64_t r = 0; r < br; ++r) {
      float* sr = s + r * kForwardKeys;
      const int64_t n = visible_keys(pb, i0 + r, j0, bc);
      std::fill(sr + n, sr + bc, 0.0f);
      if (n == 0) continue;
      const float mx = row_max(sr, n, m[r]);
      const float correction = exp_approx(m[r] - mx);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < n; ++c) {
        sr[c] = exp_approx(sr[c] - mx);
        sum += sr[c];
      }
      l[r] = l[r] * correction + sum;
      m[r] = mx;
      if (correction != 1.0f) {
        float* orow = o + r * dim;
#pragma omp simd
        for (int64_t e = 0; e < dim; ++e) orow[e] *= correction;
      }
      if (pb.dropout.p > 0.0f) {
        dropout_scales(pb.dropout, linear_index(d, b, h, i0 + r, j0), n, keep);
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) sr[c] *= keep[c];
      }
    }
    gemm(false, false, br, dim, bc, 1.0f, s, kForwardKeys, v, pb.v.row_stride, 1.0f, o, dim);
  }
  for (int64_t r = 0; r < br; ++r) {
    // l is 0 only when a row sees no key (kv_len 0): its output stays 0.
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* orow = o + r * dim;
#pragma omp simd
    for (int64_t e = 0; e < dim; ++e) orow[e] *= inv;
    row_lse[r] = m[r] + std::log(l[r]);
  }
}

// What the backward tiles read besides the problem.
struct BackwardArgs {
  const float* grad_out;
  const float* lse;
  const float* delta;
  float* grad_q;
  float* grad_k;
  float* grad_v;
};

// Per-thread tiles of backward: probabilities and dS, kBackwardRows x kBackwardKeys each.
struct BackwardScratch {
  alignas(64) float p[kBackwardRows * kBackwardKeys];
  alignas(64) float ds[kBackwardRows * kBackwardKeys];
};

// For query rows [i0, i0 + br) of head h against keys [j0, j0 + bc): p = the (dropped and
// scaled) probabilities, ds = dL/dS, both br x bc with row stride kBackwardKeys, masked entries 0.
void block_grads(const AttentionProblem& pb, const BackwardArgs& args, int64_t b, int64_t h,
                 int64_t i0, int64_t br, int64_t j0, int64_t bc, BackwardScratch& scratch) {
  const AttentionDims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t kvh = h / (d.q_heads / d.kv_heads);
  const int64_t row0 = (b * d.q_heads + h) * d.q_len + i0;
  float* p = scratch.p;
  float* ds = scratch.ds;
  gemm(false, true, br, bc, dim, pb.scale, tile_of(pb.q, b, h, i0), pb.q.row_stride,
       tile_of(pb.k, b, kvh, j0), pb.k.row_stride, 0.0f, p, kBackwardKeys);
  gemm(false, true, br, bc, dim, 1.0f, args.grad_out + row0 * dim, dim,
       tile_of(pb.v, b, kvh, j0), pb.v.row_stride, 0.0f, ds, kBackwardKeys);
  alignas(64) float keep[kBackwardKeys];
  for (int64_t r = 0; r < br; ++r) {
    float* pr = p + r * kBackwardKeys;
    float* dsr = ds + r * kBackwardKeys;
    const int64_t n = visible_keys(pb, i0 + r, j0, bc);
    const float row_lse = args.lse[row0 + r];
    const float row_delta = args.delta[row0 + r];
    if (pb.dropout.p > 0.0f) {
      dropout_scales(pb.dropout, linear_index(d, b, h, i0 + r, j0), n, keep);
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) {
        const float prob = exp_approx(pr[c] - row_lse);
        dsr[c] = prob * (dsr[c] * keep[c] - row_delta);
        pr[c] = prob * keep[c];
      }
    } else {
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) {
        const float prob = exp_approx(pr[c] - row_lse);
        dsr[c] = prob * (dsr[c] - row_delta);
        pr[c] = prob;
      }
    }
    std::fill(pr + n, pr + bc, 0.0f);
    std::fill(dsr + n, dsr + bc, 0.0f);
  }
}

// dK and dV of key tile j0 of kv head kvh (written from zero), and with dq also the
// contributions of this key tile to dQ of the query heads of the group. Query rows run in
// chunks of kBackwardRows from the first row that sees the tile (j0 when causal).
void backward_key_tile(const AttentionProblem& pb, const BackwardArgs& args, int64_t b,
                       int64_t kvh, int64_t j0, bool dq, BackwardScratch& scratch) {
  const AttentionDims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t group = d.q_heads / d.kv_heads;
  const int64_t bc = std::min(kBackwardKeys, d.kv_len - j0);
  const int64_t kv_row = (b * d.kv_heads + kvh) * d.kv_len + j0;
  float* dk = args.grad_k + kv_row * dim;
  float* dv = args.grad_v + kv_row * dim;
  std::fill(dk, dk + bc * dim, 0.0f);
  std::fill(dv, dv + bc * dim, 0.0f);
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int64_t i0 = pb.causal ? j0 : 0; i0 < d.q_len; i0 += kBackwardRows) {
      const int64_t br = std::min(kBackwardRows, d.q_len - i0);
      const int64_t q_row = (b * d.q_heads + h) * d.q_len + i0;
      block_grads(pb, args, b, h, i0, br, j0, bc, scratch);
      gemm(true, false, bc, dim, br, 1.0f, scratch.p, kBackwardKeys,
           args.grad_out + q_row * dim, dim, 1.0f, dv, dim);
      gemm(true, false, bc, dim, br, pb.scale, scratch.ds, kBackwardKeys,
           tile_of(pb.q, b, h, i0), pb.q.row_stride, 1.0f, dk, dim);
      if (dq) {
        gemm(false, false, br, dim, bc, pb.scale, scratch.ds, kBackwardKeys,
             tile_of(pb.k, b, kvh, j0), pb.k.row_stride, 1.0f, args.grad_q + q_row * dim, dim);
      }
    }
  }
}

// dQ of query rows [i0, i0 + kBackwardRows) of head h, from the key tiles in ascending order.
void backward_query_tile(const AttentionProblem& pb, const BackwardArgs& args, int64_t b,
                         int64_t h, int64_t i0, BackwardScratch& scratch) {
  const AttentionDims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t br = std::min(kBackwardRows, d.q_len - i0);
  const int64_t kvh = h / (d.q_heads / d.kv_heads);
  float* dq = args.grad_q + ((b * d.q_heads + h) * d.q_len + i0) * dim;
  std::fill(dq, dq + br * dim, 0.0f);
  const int64_t key_end = pb.causal ? std::min(d.kv_len, i0 + br) : d.kv_len;
  for (int64_t j0 = 0; j0 < key_end; j0 += kBackwardKeys) {
    const int64_t bc = std::min(kBackwardKeys, d.kv_len - j0);
    // Causal: rows before j0 see none of this tile; start at the first that does.
    const int64_t skip = pb.causal ? std::max<int64_t>(j0 - i0, 0) : 0;
    block_grads(pb, args, b, h, i0 + skip, br - skip, j0, bc, scratch);
    gemm(false, false, br - skip, dim, bc, pb.scale, scratch.ds, kBackwardKeys,
         tile_of(pb.k, b, kvh, j0), pb.k.row_stride, 1.0f, dq + skip * dim, dim);
  }
}

bool worth_parallel(const AttentionDims& d) {
  return d.batch * d.q_heads * d.q_len * d.kv_len * d.head_dim > kParallelWork;
}

}  // namespace

void attention_forward(const AttentionProblem& pb, float* out, float* lse) {
  const AttentionDims& d = pb.dims;
  const int64_t q_tiles = ceil_div(d.q_len, kForwardRows);
  const int64_t items = d.batch * d.q_heads * q_tiles;
  // Causal tiles differ in cost, hence the dynamic schedule, longest (last) tiles first.
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(d))
  for (int64_t item = 0; item < items; ++item) {
    const int64_t bh = item / q_tiles;
    const int64_t it = q_tiles - 1 - item % q_tiles;
    forward_tile(pb, bh / d.q_heads, bh % d.q_heads, it * kForwardRows, out, lse);
  }
}

void attention_backward(const AttentionProblem& pb, const float* out, const float* grad_out,
                        const float* lse, float* delta, float* grad_q, float* grad_k,
                        float* grad_v) {
  const AttentionDims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t rows = d.batch * d.q_heads * d.q_len;
  const bool parallel = worth_parallel(d);
#pragma omp parallel for if (parallel)
  for (int64_t row = 0; row < rows; ++row) {
    const float* o = out + row * dim;
    const float* g = grad_out + row * dim;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t e = 0; e < dim; ++e) sum += o[e] * g[e];
    delta[row] = sum;
  }
  const BackwardArgs args{grad_out, lse, delta, grad_q, grad_k, grad_v};
  const int64_t heads = d.batch * d.kv_heads;
  const int64_t k_tiles = ceil_div(d.kv_len, kBackwardKeys);
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  // Note [Attention backward schedules]
  // With enough key/value heads to keep every thread busy, one thread owns a whole kv head: its
  // dK, dV and the dQ of its query heads, all in one pass (5 tile products per block, as FA2).
  // Otherwise threads take single key tiles (dK, dV) and a second pass over query tiles
  // recomputes the probabilities for dQ (7 products per block), so that no dQ row is written by
  // two threads. Either way every sum runs in an order fixed by the shapes and the schedule,
  // which depends only on the thread count.
  if (heads >= 4 * threads || heads % threads == 0) {
#pragma omp parallel if (parallel)
    {
      BackwardScratch scratch;
#pragma omp for schedule(dynamic, 1)
      for (int64_t head = 0; head < heads; ++head) {
        const int64_t b = head / d.kv_heads, kvh = head % d.kv_heads;
        const int64_t group = d.q_heads / d.kv_heads;
        float* dq = grad_q + (b * d.q_heads + kvh * group) * d.q_len * dim;
        std::fill(dq, dq + group * d.q_len * dim, 0.0f);
        for (int64_t jt = 0; jt < k_tiles; ++jt) {
          backward_key_tile(pb, args, b, kvh, jt * kBackwardKeys, true, scratch);
        }
      }
    }
    return;
  }
  const int64_t q_tiles = ceil_div(d.q_len, kBackwardRows);
#pragma omp parallel if (parallel)
  {
    BackwardScratch scratch;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t item = 0; item < heads * k_tiles; ++item) {
      const int64_t head = item / k_tiles;
      backward_key_tile(pb, args, head / d.kv_heads, head % d.kv_heads,
                        (item % k_tiles) * kBackwardKeys, false, scratch);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < d.batch * d.q_heads * q_tiles; ++item) {
      const int64_t bh = item / q_tiles;
      const int64_t it = q_tiles - 1 - item % q_tiles;
      backward_query_tile(pb, args, bh / d.q_heads, bh % d.q_heads, it * kBackwardRows, scratch);
    }
  }
}

}  // namespace headroom::cpu
