// Flash-attention-2 on the CPU. Work items own their outputs (a query tile in forward; a key/value
// head, or one of its key tiles, in backward), so no two threads write one element and every sum
// runs in a fixed order: results repeat bit for bit. bf16 / f16 operands are widened tile by tile
// into stack buffers of the working thread; no buffer grows with the problem beyond a tile.
#include "backend/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/attention_buffers.h"
#include "backend/attention_kernels.h"
#include "backend/cpu/backend_parts.h"
#include "backend/cpu/gemm.h"
#include "backend/exp_approx.h"
#include "core/dtype_convert.h"
#include "core/error.h"
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

// Note [Widened attention tiles]
// f32 operands are read in place. A bf16 / f16 tile (its rows of q, k, v or dO) is widened into
// a stack buffer of the working thread before its products, and dK, dV and the output are summed
// in fp32 stack tiles and rounded once into their dtype (dQ sums in the op's f32 grad_q_accum).
// The buffers hold kWideTileFloats floats (kWideKeyFloats for backward's key-side tiles), so for
// a head size above 64 (forward's keys) or 128 (backward's keys) the tiles of a low-precision
// problem have fewer rows than the f32 ones: at most about 260 KiB of stack per thread in
// forward and 390 KiB in backward, whatever the problem. Up to those head sizes the tiles, and so
// every sum's order, are those of the f32 kernel on the widened values.
constexpr int64_t kWideTileFloats = 16384;
constexpr int64_t kWideKeyFloats = 8192;

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
void dropout_scales(const DropoutParams& dropout, uint64_t first, int64_t n, float* out) {
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

// A [B, H, T, D] operand whose last dimension is contiguous (element strides of the rest), in
// its own dtype.
struct Operand {
  const char* data;
  DType dtype;
  int64_t element_size;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
};

Operand operand_of(const Tensor& x) {
  return {static_cast<const char*>(x.data_ptr()),
          x.dtype(),
          static_cast<int64_t>(x.element_size()),
          x.stride(0),
          x.stride(1),
          x.stride(2)};
}

struct Dims {
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads;  // divides q_heads: query head h reads kv head h / (q_heads / kv_heads)
  int64_t q_len;
  int64_t kv_len;
  int64_t head_dim;
};

// The tile shapes of one problem: the f32 ones, or fewer rows for a low-precision problem with a
// large head size (Note [Widened attention tiles]).
struct Tiles {
  int64_t forward_rows = kForwardRows;
  int64_t forward_keys = kForwardKeys;
  int64_t backward_rows = kBackwardRows;
  int64_t backward_keys = kBackwardKeys;
};

// One sequence of a batch row: queries [begin, q_end) against keys [begin, kv_end); the whole row
// (begin 0, q_len, kv_len) unless packed (Note [Packed sequences in attention]). Every tile of a
// loop below starts at `begin` and ends by the segment's end.
struct Segment {
  int64_t b;
  int64_t begin;
  int64_t q_end;
  int64_t kv_end;
};

// The segments of a problem, and for one of its loops the flat work items over them: item n of
// segment s is first[s] + n (heads x tiles of the segment).
struct WorkList {
  std::vector<int64_t> first;  // segments + 1 entries
  int64_t size() const { return first.back(); }
  // The segment of item `item` and the item's index within it.
  std::pair<size_t, int64_t> locate(int64_t item) const {
    const auto it = std::upper_bound(first.begin(), first.end(), item);
    const auto s = static_cast<size_t>(it - first.begin() - 1);
    return {s, item - first[s]};
  }
};

struct Problem {
  Dims dims;
  Operand q, k, v;
  bool causal;     // key j > query i masked (q_len == kv_len)
  int64_t window;  // 0, or (causal) key j <= i - window masked too
  float scale;
  float softcap;  // 0, or scores capped as softcap * tanh(s / softcap)
  DropoutParams dropout;
  bool wide;  // q, k, v are bf16 / f16: tiles are widened (Note [Widened attention tiles])
  Tiles tiles;
  std::vector<Segment> segments;  // batch-major, in row order

  // The work items of `units` per segment (heads) times the segment's tiles of `tile` rows,
  // counted over its queries (`queries`) or keys.
  WorkList work(int64_t units, int64_t tile, bool queries) const {
    WorkList w;
    w.first.reserve(segments.size() + 1);
    w.first.push_back(0);
    for (const Segment& seg : segments) {
      const int64_t n = (queries ? seg.q_end : seg.kv_end) - seg.begin;
      w.first.push_back(w.first.back() + units * ((n + tile - 1) / tile));
    }
    return w;
  }
};

Problem make_problem(const char* entry, const Tensor& q, const Tensor& k, const Tensor& v,
                     bool causal, int64_t window, float scale, float softcap,
                     const DropoutParams& dropout, const AttentionSequences& sequences) {
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    throw ValueError(str_cat(entry, ": q, k and v must share a dtype, got ", dtype_name(q.dtype()),
                             ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype())));
  }
  if (q.dtype() != DType::f32 && q.dtype() != DType::bf16 && q.dtype() != DType::f16) {
    throw ValueError(str_cat(entry, ": q must be f32, bf16 or f16, not ", dtype_name(q.dtype())));
  }
  for (const Tensor* x : {&q, &k, &v}) {
    if (x->size(3) > 1 && x->stride(3) != 1) {
      throw ValueError(str_cat(entry, ": q, k and v need a unit stride in the head dim, got ",
                               x->shape(), " with strides ", x->strides()));
    }
  }
  if (window < 0 || (window > 0 && !causal)) {
    throw ValueError(str_cat(entry, ": window ", window, " needs causal and must be positive"));
  }
  if (!(softcap >= 0.0f)) {
    throw ValueError(str_cat(entry, ": softcap ", softcap, " must be positive, or 0 for none"));
  }
  Problem pb{{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)},
             operand_of(q),
             operand_of(k),
             operand_of(v),
             causal,
             window,
             scale,
             softcap,
             dropout,
             q.dtype() != DType::f32,
             {},
             {}};
  check_attention_sequences(entry, q, k, causal, sequences);
  if (sequences.packed()) {
    const std::vector<int32_t>& cu = *sequences.host;
    const int64_t len = pb.dims.q_len;
    for (size_t n = 0; n + 1 < cu.size(); ++n) {
      const int64_t b = cu[n] / len, begin = cu[n] % len;
      const int64_t end = cu[n + 1] - b * len;  // <= len: no sequence crosses a row
      pb.segments.push_back({b, begin, end, end});
    }
  } else {
    for (int64_t b = 0; b < pb.dims.batch; ++b) {
      pb.segments.push_back({b, 0, pb.dims.q_len, pb.dims.kv_len});
    }
  }
  if (pb.wide) {
    const int64_t dim = pb.dims.head_dim;
    if (dim > kWideKeyFloats) {
      throw NotImplementedError(str_cat(entry, ": head size ", dim, " of a ", dtype_name(q.dtype()),
                                        " q exceeds the CPU kernels' limit of ", kWideKeyFloats,
                                        " for bf16 / f16"));
    }
    pb.tiles.forward_rows = std::min(kForwardRows, kWideTileFloats / dim);
    pb.tiles.forward_keys = std::min(kForwardKeys, kWideTileFloats / dim);
    pb.tiles.backward_rows = std::min(kBackwardRows, kWideTileFloats / dim);
    pb.tiles.backward_keys = std::min(kBackwardKeys, kWideKeyFloats / dim);
  }
  return pb;
}

// fp32 rows of a tile: `data` with `ld` floats between rows.
struct Rows {
  const float* data;
  int64_t ld;
};

// fp32 rows being summed, likewise.
struct SumRows {
  float* data;
  int64_t ld;
  float* row(int64_t r) const { return data + r * ld; }
};

// Rows [row, row + n) of head h of batch b of x as fp32: in place when x is f32, else widened
// into buf (n * dim floats, ld = dim).
Rows rows_of(const Operand& x, int64_t dim, int64_t b, int64_t h, int64_t row, int64_t n,
             float* buf) {
  const int64_t first = b * x.batch_stride + h * x.head_stride + row * x.row_stride;
  if (x.dtype == DType::f32) {
    return {reinterpret_cast<const float*>(x.data) + first, x.row_stride};
  }
  for (int64_t r = 0; r < n; ++r) {
    convert_to_f32(x.data + (first + r * x.row_stride) * x.element_size, x.dtype, buf + r * dim,
                   static_cast<size_t>(dim));
  }
  return {buf, dim};
}

// A [B, H, T, D] result in its own dtype with a unit stride in D (element strides of the rest):
// f32 computed in place, bf16 / f16 computed in an fp32 tile (ld = D) and rounded once.
struct Result {
  char* data;
  DType dtype;
  int64_t element_size;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;

  explicit Result(const Tensor& t)
      : data(static_cast<char*>(t.data_ptr())),
        dtype(t.dtype()),
        element_size(static_cast<int64_t>(t.element_size())),
        batch_stride(t.stride(0)),
        head_stride(t.stride(1)),
        row_stride(t.stride(2)) {}

  int64_t first(int64_t b, int64_t h, int64_t row) const {
    return b * batch_stride + h * head_stride + row * row_stride;
  }
  // Where to sum rows from (b, h, row): the tensor itself (ld: its row stride) or `tile` (ld: dim).
  SumRows target(int64_t b, int64_t h, int64_t row, int64_t dim, float* tile) const {
    if (dtype == DType::f32) return {reinterpret_cast<float*>(data) + first(b, h, row), row_stride};
    return {tile, dim};
  }
  // Rounds n computed rows into the tensor from (b, h, row) (nothing to do for f32).
  void store(int64_t b, int64_t h, int64_t row, int64_t n, int64_t dim,
             const float* computed) const {
    if (dtype == DType::f32) return;
    for (int64_t r = 0; r < n; ++r) {
      convert_from_f32(computed + r * dim,
                       data + (first(b, h, row) + r * row_stride) * element_size, dtype,
                       static_cast<size_t>(dim));
    }
  }
};

// n rows of dim floats at row stride ld set to 0.
void zero_rows(const SumRows& rows, int64_t n, int64_t dim) {
  for (int64_t r = 0; r < n; ++r) std::fill(rows.row(r), rows.row(r) + dim, 0.0f);
}

// The f32 dQ sums [B, Hq, Tq, D] (unit stride in D): grad_q itself (f32) or grad_q_accum.
struct QuerySums {
  float* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;

  explicit QuerySums(const Tensor& t)
      : data(t.data<float>()),
        batch_stride(t.stride(0)),
        head_stride(t.stride(1)),
        row_stride(t.stride(2)) {}
  SumRows rows(int64_t b, int64_t h, int64_t row) const {
    return {data + b * batch_stride + h * head_stride + row * row_stride, row_stride};
  }
};

// Columns [begin, end) of key tile [j0, j0 + bc) that row i may see: all; those up to the
// diagonal when causal; and with a window only keys past i - window. 0 <= begin <= end <= bc.
// Tiles lie within one segment, so its bounds need no test here.
struct KeyRange {
  int64_t begin;
  int64_t end;
  int64_t size() const { return end - begin; }
};

inline KeyRange visible_keys(const Problem& pb, int64_t i, int64_t j0, int64_t bc) {
  if (!pb.causal) return {0, bc};
  const int64_t begin = pb.window > 0 ? std::clamp<int64_t>(i - pb.window + 1 - j0, 0, bc) : 0;
  return {begin, std::clamp<int64_t>(i - j0 + 1, 0, bc)};
}

// The first key of segment `seg` that any of query rows [i0, ...) may see, rounded down to a
// multiple of `tile` from the segment's start so that the key tiles, and the order of every sum,
// are those of the unwindowed problem; the tiles before it are fully masked and skipped.
inline int64_t first_key_tile(const Problem& pb, const Segment& seg, int64_t i0, int64_t tile) {
  if (pb.window == 0 || i0 - seg.begin < pb.window) return seg.begin;
  return seg.begin + (i0 - seg.begin - pb.window + 1) / tile * tile;
}

// One past the last query row of `seg` that may see key tile [j0, j0 + bc).
inline int64_t query_end(const Problem& pb, const Segment& seg, int64_t j0, int64_t bc) {
  if (pb.window == 0) return seg.q_end;
  return std::min(seg.q_end, j0 + bc - 1 + pb.window);
}

inline uint64_t linear_index(const Dims& d, int64_t b, int64_t h, int64_t i, int64_t j) {
  return static_cast<uint64_t>(((b * d.q_heads + h) * d.q_len + i) * d.kv_len + j);
}

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// Gemma 2's soft cap of n scores in place, as transformers computes it: (s / c), tanh, times c;
// with `slope`, also the cap's derivative 1 - tanh^2 of each.
void cap_scores(float* s, int64_t n, float cap, float* slope = nullptr) {
  for (int64_t c = 0; c < n; ++c) {
    const float t = std::tanh(s[c] / cap);
    s[c] = t * cap;
    if (slope) slope[c] = 1.0f - t * t;
  }
}

// A thread's widened tiles of forward (Note [Widened attention tiles]): q rows, the k or v rows
// of the current key tile, and the output rows summed in fp32.
struct WideForwardTiles {
  alignas(64) float q[kWideTileFloats];
  alignas(64) float kv[kWideTileFloats];
  alignas(64) float out[kWideTileFloats];
};

// One query tile of one head: O and lse for rows [i0, i0 + br). `wide` is null for f32.
void forward_tile(const Problem& pb, const Segment& seg, int64_t h, int64_t i0, const Result& out,
                  float* lse, WideForwardTiles* wide) {
  const Dims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t b = seg.b;
  const int64_t br = std::min(pb.tiles.forward_rows, seg.q_end - i0);
  const int64_t kvh = h / (d.q_heads / d.kv_heads);
  const Rows q = rows_of(pb.q, dim, b, h, i0, br, wide ? wide->q : nullptr);
  const SumRows o = out.target(b, h, i0, dim, wide ? wide->out : nullptr);
  float* row_lse = lse + (b * d.q_heads + h) * d.q_len + i0;
  alignas(64) float s[kForwardRows * kForwardKeys];
  alignas(64) float keep[kForwardKeys];
  float m[kForwardRows], l[kForwardRows];
  for (int64_t r = 0; r < br; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0.0f;
  }
  zero_rows(o, br, dim);
  const int64_t key_end = pb.causal ? std::min(seg.kv_end, i0 + br) : seg.kv_end;
  for (int64_t j0 = first_key_tile(pb, seg, i0, pb.tiles.forward_keys); j0 < key_end;
       j0 += pb.tiles.forward_keys) {
    const int64_t bc = std::min(pb.tiles.forward_keys, key_end - j0);
    const Rows k = rows_of(pb.k, dim, b, kvh, j0, bc, wide ? wide->kv : nullptr);
    gemm(false, true, br, bc, dim, pb.scale, q.data, q.ld, k.data, k.ld, 0.0f, s, kForwardKeys);
    for (int64_t r = 0; r < br; ++r) {
      const KeyRange keys = visible_keys(pb, i0 + r, j0, bc);
      const int64_t n = keys.size();
      float* sr = s + r * kForwardKeys;
      std::fill(sr, sr + keys.begin, 0.0f);
      std::fill(sr + keys.end, sr + bc, 0.0f);
      if (n == 0) continue;
      sr += keys.begin;  // the visible columns
      if (pb.softcap > 0.0f) cap_scores(sr, n, pb.softcap);
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
        float* orow = o.row(r);
#pragma omp simd
        for (int64_t e = 0; e < dim; ++e) orow[e] *= correction;
      }
      if (pb.dropout.p > 0.0f) {
        dropout_scales(pb.dropout, linear_index(d, b, h, i0 + r, j0 + keys.begin), n, keep);
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) sr[c] *= keep[c];
      }
    }
    // k's widened rows are spent: v's take their place.
    const Rows v = rows_of(pb.v, dim, b, kvh, j0, bc, wide ? wide->kv : nullptr);
    gemm(false, false, br, dim, bc, 1.0f, s, kForwardKeys, v.data, v.ld, 1.0f, o.data, o.ld);
  }
  for (int64_t r = 0; r < br; ++r) {
    // l is 0 only when a row sees no key (kv_len 0): its output stays 0.
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* orow = o.row(r);
#pragma omp simd
    for (int64_t e = 0; e < dim; ++e) orow[e] *= inv;
    row_lse[r] = m[r] + std::log(l[r]);
  }
  out.store(b, h, i0, br, dim, o.data);
}

// What the backward tiles read and write besides the problem.
struct BackwardArgs {
  Operand grad_out;  // [B, Hq, Tq, D] in q's dtype
  const float* lse;
  const float* delta;
  QuerySums grad_q;  // f32 dQ sums: grad_q itself (f32) or grad_q_accum
  Result grad_k;
  Result grad_v;
};

// Per-thread tiles of backward: probabilities and dS, kBackwardRows x kBackwardKeys each.
struct BackwardScratch {
  alignas(64) float p[kBackwardRows * kBackwardKeys];
  alignas(64) float ds[kBackwardRows * kBackwardKeys];
};

// A thread's widened tiles of backward (Note [Widened attention tiles]): q and dO rows of a
// query tile, k and v rows of a key tile, and that key tile's dK and dV summed in fp32.
struct WideBackwardTiles {
  alignas(64) float q[kWideTileFloats];
  alignas(64) float grad_out[kWideTileFloats];
  alignas(64) float k[kWideKeyFloats];
  alignas(64) float v[kWideKeyFloats];
  alignas(64) float grad_k[kWideKeyFloats];
  alignas(64) float grad_v[kWideKeyFloats];
};

// The fp32 rows one block of backward reads: br query rows of q and dO, bc key rows of k and v.
struct BlockRows {
  Rows q, grad_out, k, v;
};

// For query rows [i0, i0 + br) of head h against keys [j0, j0 + bc): p = the (dropped and
// scaled) probabilities, ds = dL/dS, both br x bc with row stride kBackwardKeys, masked entries 0.
void block_grads(const Problem& pb, const BackwardArgs& args, int64_t b, int64_t h, int64_t i0,
                 int64_t br, int64_t j0, int64_t bc, const BlockRows& rows,
                 BackwardScratch& scratch) {
  const Dims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t row0 = (b * d.q_heads + h) * d.q_len + i0;
  float* p = scratch.p;
  float* ds = scratch.ds;
  gemm(false, true, br, bc, dim, pb.scale, rows.q.data, rows.q.ld, rows.k.data, rows.k.ld, 0.0f, p,
       kBackwardKeys);
  gemm(false, true, br, bc, dim, 1.0f, rows.grad_out.data, rows.grad_out.ld, rows.v.data, rows.v.ld,
       0.0f, ds, kBackwardKeys);
  alignas(64) float keep[kBackwardKeys];
  alignas(64) float slope[kBackwardKeys];
  for (int64_t r = 0; r < br; ++r) {
    const KeyRange keys = visible_keys(pb, i0 + r, j0, bc);
    const int64_t n = keys.size(), begin = keys.begin;
    float* pr = p + r * kBackwardKeys;
    float* dsr = ds + r * kBackwardKeys;
    std::fill(pr, pr + begin, 0.0f);
    std::fill(dsr, dsr + begin, 0.0f);
    std::fill(pr + keys.end, pr + bc, 0.0f);
    std::fill(dsr + keys.end, dsr + bc, 0.0f);
    pr += begin;  // the visible columns
    dsr += begin;
    const float row_lse = args.lse[row0 + r];
    const float row_delta = args.delta[row0 + r];
    // The capped scores; dS below is of the capped ones, and the cap's derivative carries it to
    // the scaled score.
    if (pb.softcap > 0.0f) cap_scores(pr, n, pb.softcap, slope);
    if (pb.dropout.p > 0.0f) {
      dropout_scales(pb.dropout, linear_index(d, b, h, i0 + r, j0 + begin), n, keep);
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
    if (pb.softcap > 0.0f) {
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) dsr[c] *= slope[c];
    }
  }
}

// dK and dV of key tile j0 of kv head kvh (written from zero), and with dq also the
// contributions of this key tile to dQ of the query heads of the group. Query rows run in
// chunks of backward_rows from the first row that sees the tile (j0 when causal) to the last
// (the window's end).
void backward_key_tile(const Problem& pb, const BackwardArgs& args, const Segment& seg, int64_t kvh,
                       int64_t j0, bool dq, BackwardScratch& scratch, WideBackwardTiles* wide) {
  const Dims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t b = seg.b;
  const int64_t group = d.q_heads / d.kv_heads;
  const int64_t bc = std::min(pb.tiles.backward_keys, seg.kv_end - j0);
  const SumRows dk = args.grad_k.target(b, kvh, j0, dim, wide ? wide->grad_k : nullptr);
  const SumRows dv = args.grad_v.target(b, kvh, j0, dim, wide ? wide->grad_v : nullptr);
  zero_rows(dk, bc, dim);
  zero_rows(dv, bc, dim);
  BlockRows rows{};
  rows.k = rows_of(pb.k, dim, b, kvh, j0, bc, wide ? wide->k : nullptr);
  rows.v = rows_of(pb.v, dim, b, kvh, j0, bc, wide ? wide->v : nullptr);
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t rows_end = query_end(pb, seg, j0, bc);
    for (int64_t i0 = pb.causal ? j0 : seg.begin; i0 < rows_end; i0 += pb.tiles.backward_rows) {
      const int64_t br = std::min(pb.tiles.backward_rows, rows_end - i0);
      rows.q = rows_of(pb.q, dim, b, h, i0, br, wide ? wide->q : nullptr);
      rows.grad_out = rows_of(args.grad_out, dim, b, h, i0, br, wide ? wide->grad_out : nullptr);
      block_grads(pb, args, b, h, i0, br, j0, bc, rows, scratch);
      gemm(true, false, bc, dim, br, 1.0f, scratch.p, kBackwardKeys, rows.grad_out.data,
           rows.grad_out.ld, 1.0f, dv.data, dv.ld);
      gemm(true, false, bc, dim, br, pb.scale, scratch.ds, kBackwardKeys, rows.q.data, rows.q.ld,
           1.0f, dk.data, dk.ld);
      if (dq) {
        const SumRows sums = args.grad_q.rows(b, h, i0);
        gemm(false, false, br, dim, bc, pb.scale, scratch.ds, kBackwardKeys, rows.k.data, rows.k.ld,
             1.0f, sums.data, sums.ld);
      }
    }
  }
  args.grad_k.store(b, kvh, j0, bc, dim, dk.data);
  args.grad_v.store(b, kvh, j0, bc, dim, dv.data);
}

// dQ of query rows [i0, i0 + backward_rows) of head h, from the key tiles in ascending order.
void backward_query_tile(const Problem& pb, const BackwardArgs& args, const Segment& seg, int64_t h,
                         int64_t i0, BackwardScratch& scratch, WideBackwardTiles* wide) {
  const Dims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t b = seg.b;
  const int64_t br = std::min(pb.tiles.backward_rows, seg.q_end - i0);
  const int64_t kvh = h / (d.q_heads / d.kv_heads);
  const SumRows dq = args.grad_q.rows(b, h, i0);
  zero_rows(dq, br, dim);
  const Rows q = rows_of(pb.q, dim, b, h, i0, br, wide ? wide->q : nullptr);
  const Rows grad_out = rows_of(args.grad_out, dim, b, h, i0, br, wide ? wide->grad_out : nullptr);
  const int64_t key_end = pb.causal ? std::min(seg.kv_end, i0 + br) : seg.kv_end;
  for (int64_t j0 = first_key_tile(pb, seg, i0, pb.tiles.backward_keys); j0 < key_end;
       j0 += pb.tiles.backward_keys) {
    const int64_t bc = std::min(pb.tiles.backward_keys, seg.kv_end - j0);
    // Causal: rows before j0 see none of this tile; start at the first that does.
    const int64_t skip = pb.causal ? std::max<int64_t>(j0 - i0, 0) : 0;
    BlockRows rows{{q.data + skip * q.ld, q.ld},
                   {grad_out.data + skip * grad_out.ld, grad_out.ld},
                   rows_of(pb.k, dim, b, kvh, j0, bc, wide ? wide->k : nullptr),
                   rows_of(pb.v, dim, b, kvh, j0, bc, wide ? wide->v : nullptr)};
    block_grads(pb, args, b, h, i0 + skip, br - skip, j0, bc, rows, scratch);
    gemm(false, false, br - skip, dim, bc, pb.scale, scratch.ds, kBackwardKeys, rows.k.data,
         rows.k.ld, 1.0f, dq.row(skip), dq.ld);
  }
}

bool worth_parallel(const Dims& d) {
  return d.batch * d.q_heads * d.q_len * d.kv_len * d.head_dim > kParallelWork;
}

// The forward items, each thread with its widened tiles when kWide.
template <bool kWide>
void forward_items(const Problem& pb, const Result& out, float* lse) {
  const Dims& d = pb.dims;
  const WorkList work = pb.work(d.q_heads, pb.tiles.forward_rows, true);
  const int64_t items = work.size();
#pragma omp parallel if (worth_parallel(d))
  {
    [[maybe_unused]] std::conditional_t<kWide, WideForwardTiles, char> tiles;
    WideForwardTiles* wide = nullptr;
    if constexpr (kWide) wide = &tiles;
      // Causal tiles differ in cost, hence the dynamic schedule, longest (last) tiles first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const auto [s, n] = work.locate(item);
      const Segment& seg = pb.segments[s];
      const int64_t q_tiles = ceil_div(seg.q_end - seg.begin, pb.tiles.forward_rows);
      const int64_t it = q_tiles - 1 - n % q_tiles;
      forward_tile(pb, seg, n / q_tiles, seg.begin + it * pb.tiles.forward_rows, out, lse, wide);
    }
  }
}

// delta[row] = sum over D of out * grad_out, both [B, Hq, Tq, D] in q's dtype (unit stride in
// D); bf16 / f16 rows are widened in chunks of kDeltaChunk.
constexpr int64_t kDeltaChunk = 256;

void row_deltas(const Dims& d, const Tensor& out, const Tensor& grad_out, float* delta,
                bool parallel) {
  const Operand o_rows = operand_of(out), g_rows = operand_of(grad_out);
  const int64_t dim = d.head_dim;
  const int64_t rows = d.batch * d.q_heads * d.q_len;
  auto first = [&](const Operand& x, int64_t row) {
    const int64_t bh = row / d.q_len;
    return (bh / d.q_heads) * x.batch_stride + (bh % d.q_heads) * x.head_stride +
           (row % d.q_len) * x.row_stride;
  };
  if (out.dtype() == DType::f32) {
#pragma omp parallel for if (parallel)
    for (int64_t row = 0; row < rows; ++row) {
      const float* o = reinterpret_cast<const float*>(o_rows.data) + first(o_rows, row);
      const float* g = reinterpret_cast<const float*>(g_rows.data) + first(g_rows, row);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t e = 0; e < dim; ++e) sum += o[e] * g[e];
      delta[row] = sum;
    }
    return;
  }
  const int64_t size = o_rows.element_size;
#pragma omp parallel for if (parallel)
  for (int64_t row = 0; row < rows; ++row) {
    alignas(64) float o[kDeltaChunk], g[kDeltaChunk];
    const char* o_row = o_rows.data + first(o_rows, row) * size;
    const char* g_row = g_rows.data + first(g_rows, row) * size;
    float sum = 0.0f;
    for (int64_t e0 = 0; e0 < dim; e0 += kDeltaChunk) {
      const int64_t n = std::min(kDeltaChunk, dim - e0);
      convert_to_f32(o_row + e0 * size, out.dtype(), o, static_cast<size_t>(n));
      convert_to_f32(g_row + e0 * size, grad_out.dtype(), g, static_cast<size_t>(n));
#pragma omp simd reduction(+ : sum)
      for (int64_t e = 0; e < n; ++e) sum += o[e] * g[e];
    }
    delta[row] = sum;
  }
}

// The backward passes after delta, each thread with its widened tiles when kWide.
template <bool kWide>
void backward_items(const Problem& pb, const BackwardArgs& args, bool parallel) {
  const Dims& d = pb.dims;
  const int64_t dim = d.head_dim;
  const int64_t group = d.q_heads / d.kv_heads;
  // A packed row's sequences count as heads of their own.
  const int64_t heads = static_cast<int64_t>(pb.segments.size()) * d.kv_heads;
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
      [[maybe_unused]] std::conditional_t<kWide, WideBackwardTiles, char> tiles;
      WideBackwardTiles* wide = nullptr;
      if constexpr (kWide) wide = &tiles;
#pragma omp for schedule(dynamic, 1)
      for (int64_t head = 0; head < heads; ++head) {
        const Segment& seg = pb.segments[static_cast<size_t>(head / d.kv_heads)];
        const int64_t kvh = head % d.kv_heads;
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          zero_rows(args.grad_q.rows(seg.b, h, seg.begin), seg.q_end - seg.begin, dim);
        }
        for (int64_t j0 = seg.begin; j0 < seg.kv_end; j0 += pb.tiles.backward_keys) {
          backward_key_tile(pb, args, seg, kvh, j0, true, scratch, wide);
        }
      }
    }
    return;
  }
  const WorkList key_work = pb.work(d.kv_heads, pb.tiles.backward_keys, false);
  const WorkList query_work = pb.work(d.q_heads, pb.tiles.backward_rows, true);
#pragma omp parallel if (parallel)
  {
    BackwardScratch scratch;
    [[maybe_unused]] std::conditional_t<kWide, WideBackwardTiles, char> tiles;
    WideBackwardTiles* wide = nullptr;
    if constexpr (kWide) wide = &tiles;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t item = 0; item < key_work.size(); ++item) {
      const auto [s, n] = key_work.locate(item);
      const Segment& seg = pb.segments[s];
      const int64_t k_tiles = ceil_div(seg.kv_end - seg.begin, pb.tiles.backward_keys);
      backward_key_tile(pb, args, seg, n / k_tiles,
                        seg.begin + (n % k_tiles) * pb.tiles.backward_keys, false, scratch, wide);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < query_work.size(); ++item) {
      const auto [s, n] = query_work.locate(item);
      const Segment& seg = pb.segments[s];
      const int64_t q_tiles = ceil_div(seg.q_end - seg.begin, pb.tiles.backward_rows);
      const int64_t it = q_tiles - 1 - n % q_tiles;
      backward_query_tile(pb, args, seg, n / q_tiles, seg.begin + it * pb.tiles.backward_rows,
                          scratch, wide);
    }
  }
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                       int64_t window, float scale, float softcap, DropoutParams dropout,
                       const Tensor& out, const Tensor& lse, const AttentionSequences& sequences) {
  const char* entry = "attention_forward";
  const Problem pb =
      make_problem(entry, q, k, v, causal, window, scale, softcap, dropout, sequences);
  check_attention_forward_buffers(entry, q, out, lse);
  if (pb.wide) {
    forward_items<true>(pb, Result(out), lse.data<float>());
  } else {
    forward_items<false>(pb, Result(out), lse.data<float>());
  }
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& grad_out, const Tensor& lse, bool causal, int64_t window,
                        float scale, float softcap, DropoutParams dropout, const Tensor& delta,
                        const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                        const Tensor& grad_q_accum, const AttentionSequences& sequences) {
  const char* entry = "attention_backward";
  const Problem pb =
      make_problem(entry, q, k, v, causal, window, scale, softcap, dropout, sequences);
  const Dims& d = pb.dims;
  const int64_t rows = d.batch * d.q_heads * d.q_len;
  check_attention_backward_buffers(entry, q, k, out, grad_out, lse, delta, grad_q, grad_k, grad_v,
                                   grad_q_accum);
  const bool parallel = worth_parallel(d);
  row_deltas(d, out, grad_out, delta.data<float>(), parallel);
  // dQ sums in fp32: in grad_q itself for f32, else in grad_q_accum, rounded once below.
  const Tensor& accum = pb.wide ? grad_q_accum : grad_q;
  const BackwardArgs args{operand_of(grad_out), lse.data<float>(), delta.data<float>(),
                          QuerySums(accum),     Result(grad_k),    Result(grad_v)};
  if (pb.wide) {
    backward_items<true>(pb, args, parallel);
    const Result dst(grad_q);
    const float* sums = grad_q_accum.data<float>();
#pragma omp parallel for if (parallel)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t bh = row / d.q_len;
      dst.store(bh / d.q_heads, bh % d.q_heads, row % d.q_len, 1, d.head_dim,
                sums + row * d.head_dim);
    }
  } else {
    backward_items<false>(pb, args, parallel);
  }
}

void fill_attention_kernels(AttentionKernels& kernels) {
  kernels.forward = attention_forward;
  kernels.backward = attention_backward;
}

}  // namespace headroom::cpu
