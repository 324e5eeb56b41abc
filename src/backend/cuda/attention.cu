// Flash-attention-2 on the GPU: the forward / backward entries of backend/attention_kernels.h,
// with the semantics of the CPU kernels (backend/cpu/attention.h): causal mask, sliding window,
// score soft-capping, GQA head mapping, dropout on the probabilities from the same Philox stream,
// lse per row, and packed sequences (Note [Packed sequences in attention]): here a query's first
// visible key is also its sequence's start, found in cu_seqlens, with tiles aligned to the row as
// unpacked (the CPU aligns them to each sequence: results agree within rounding, not bit for bit).
//
// cuDNN's fused SDPA takes the calls it supports first (backend/cuda/cudnn_attention.h: bf16 /
// f16 without dropout or softcap, unpacked); these kernels run the rest, and every call where
// libcudnn cannot be opened.
//
// Two kernel families. bf16 / f16 with head size up to 128 run on tensor cores (nvcuda::wmma,
// 16x16x16, fp32 accumulation), the head size padded to 64 or 128 in shared memory. f32, and
// head sizes 129..256, run on CUDA cores (fp32 throughout). Both use the CPU kernel's exp
// (backend/exp_approx.h), so masked and first-tile scores give exactly 0.
//
// Forward is deterministic. Backward sums dK and dV in a fixed order (one block owns a key tile
// of a kv head and walks its query heads and query tiles in order), but adds each key tile's dQ
// into an fp32 buffer with atomicAdd, as FlashAttention-2 does: dQ may differ in its last bits
// from run to run. Everything else repeats bit for bit.
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "backend/attention_buffers.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/exp_approx.h"
#include "core/error.h"
#include "core/philox.h"

namespace headroom::cuda {
namespace {

namespace wmma = nvcuda::wmma;

// One [B, H, T, D] operand with a unit stride in D (element strides of the rest).
struct Operand {
  const void* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
};

// One [B, H, T, D] result with a unit stride in D, likewise.
struct OutOperand {
  void* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t row_stride;
};

struct Params {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, dim;
  int64_t group;  // q_heads / kv_heads: query head h reads kv head h / group
  Operand q, k, v;
  bool causal;
  int64_t window;  // 0, or (causal) key j <= i - window masked too
  float scale;
  float softcap;     // 0, or scores capped as softcap * tanh(s / softcap)
  float dropout_p;   // 0: no dropout
  float keep_scale;  // 1 / (1 - dropout_p), computed as the CPU does
  uint64_t seed, offset;
  // Packed sequences: cu_seqlens [num_seqs + 1] over the flattened [B * T] positions; null when
  // each row is one sequence.
  const int32_t* cu_seqlens;
  int64_t num_seqs;
};

template <typename T>
__device__ __forceinline__ const T* row_of(const Operand& x, int64_t b, int64_t h, int64_t row) {
  return static_cast<const T*>(x.data) + b * x.batch_stride + h * x.head_stride +
         row * x.row_stride;
}

template <typename T>
__device__ __forceinline__ T* row_at(const OutOperand& x, int64_t b, int64_t h, int64_t row) {
  return static_cast<T*>(x.data) + b * x.batch_stride + h * x.head_stride + row * x.row_stride;
}

// The element offset of row `row` of the [B * H * T] rows of x (H heads of T rows).
template <typename X>
__device__ __forceinline__ int64_t row_offset(const X& x, int64_t row, int64_t heads, int64_t len) {
  const int64_t bh = row / len;
  return (bh / heads) * x.batch_stride + (bh % heads) * x.head_stride + (row % len) * x.row_stride;
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The scaled score of a product q . k, capped when p.softcap > 0 as transformers computes it
// (CPU: cap_scores).
__device__ __forceinline__ float score_of(const Params& p, float dot) {
  const float s = dot * p.scale;
  return p.softcap > 0.0f ? tanhf(s / p.softcap) * p.softcap : s;
}

// The derivative of the cap at the product q . k: 1 - tanh^2, or 1 without a cap.
__device__ __forceinline__ float cap_slope(const Params& p, float dot) {
  if (p.softcap == 0.0f) return 1.0f;
  const float t = tanhf(dot * p.scale / p.softcap);
  return __fsub_rn(1.0f, __fmul_rn(t, t));  // as the CPU rounds it: no FMA
}

__device__ __forceinline__ int clamp_to(int64_t n, int bc) {
  return n < 0 ? 0 : (n > bc ? bc : static_cast<int>(n));
}

// The index n of the sequence holding position i of row b: cu_seqlens[n] <= b T + i <
// cu_seqlens[n + 1] (binary search; packed problems only).
__device__ __forceinline__ int64_t sequence_of(const Params& p, int64_t b, int64_t i) {
  const int64_t pos = b * p.q_len + i;
  int64_t lo = 0, hi = p.num_seqs;  // cu_seqlens[lo] <= pos < cu_seqlens[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (p.cu_seqlens[mid] <= pos) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The first position in row b of the sequence holding position i: 0 unless packed.
__device__ __forceinline__ int64_t sequence_start(const Params& p, int64_t b, int64_t i) {
  if (p.cu_seqlens == nullptr) return 0;
  return p.cu_seqlens[sequence_of(p, b, i)] - b * p.q_len;
}

// One past the last position in row b of the sequence holding position i: T unless packed.
__device__ __forceinline__ int64_t sequence_end(const Params& p, int64_t b, int64_t i) {
  if (p.cu_seqlens == nullptr) return p.q_len;
  return p.cu_seqlens[sequence_of(p, b, i) + 1] - b * p.q_len;
}

// The first key query row i of batch row b may see (causal): the window's and its sequence's.
__device__ __forceinline__ int64_t first_visible_key(const Params& p, int64_t b, int64_t i) {
  const int64_t start = sequence_start(p, b, i);
  const int64_t windowed = p.window > 0 ? i - p.window + 1 : 0;
  return windowed > start ? windowed : start;
}

// Columns [begin, end) of key tile [j0, j0 + bc) that query row i of batch row b may see, begin
// <= end (CPU: visible_keys).
struct KeyRange {
  int begin;
  int end;
};

__device__ __forceinline__ KeyRange visible_keys(const Params& p, int64_t b, int64_t i, int64_t j0,
                                                 int bc) {
  if (!p.causal) return {0, bc};
  return {clamp_to(first_visible_key(p, b, i) - j0, bc), clamp_to(i - j0 + 1, bc)};
}

// Whether query row i of batch row b sees key j.
__device__ __forceinline__ bool visible(const Params& p, int64_t b, int64_t i, int64_t j) {
  return !p.causal || (j <= i && j >= first_visible_key(p, b, i));
}

// The first key tile (of `tile` keys) that query rows [i0, ...) of batch row b may see: the ones
// before it are fully masked by the window or by earlier sequences, and skipped (CPU:
// first_key_tile).
__device__ __forceinline__ int64_t first_key_tile(const Params& p, int64_t b, int64_t i0,
                                                  int64_t tile) {
  if (!p.causal) return 0;
  return first_visible_key(p, b, i0) / tile * tile;
}

// One past the last query row of batch row b that may see key tile [j0, j0 + bc) (CPU:
// query_end): the window's end, and the end of the last key's sequence.
__device__ __forceinline__ int64_t query_end(const Params& p, int64_t b, int64_t j0, int64_t bc) {
  int64_t end = sequence_end(p, b, j0 + bc - 1);
  if (p.window > 0) end = min64(end, j0 + bc - 1 + p.window);
  return end;
}

// The dropout factor of probability (b, h, i, j): keep_scale or 0 (Note [Philox stream layout]).
__device__ __forceinline__ float dropout_factor(const Params& p, int64_t b, int64_t h, int64_t i,
                                                int64_t j) {
  const uint64_t index = static_cast<uint64_t>(((b * p.q_heads + h) * p.q_len + i) * p.kv_len + j);
  const Philox4x32Block block = philox_block(p.seed, p.offset + index / 4);
  return philox_uniform01(block.word[index % 4]) >= p.dropout_p ? p.keep_scale : 0.0f;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// ---------------------------------------------------------------------------------------------
// Tensor-core kernels (bf16 / f16, head size padded to kD = 64 or 128)

constexpr int kMmaRows = 64;  // query rows per tile: 4 warps of 16
constexpr int kMmaKeys = 64;  // keys per tile
constexpr int kMmaThreads = 128;

// Row strides (elements) of the shared tiles, padded against bank conflicts. Every wmma pointer
// must be 32-byte aligned: rows of 16 at these strides and columns of 16 keep it so.
template <int kD>
struct MmaLayout {
  static constexpr int ld_t = kD + 8;        // Q, K, V, dO tiles (T)
  static constexpr int ld_s = kMmaKeys + 4;  // scores, dP (f32)
  static constexpr int ld_p = kMmaKeys + 8;  // probabilities, dS (T)
  static constexpr int ld_o = kD + 4;        // forward's output accumulator (f32)
};

// rows x kD tile of T from `src` (row stride in elements), rows beyond `valid` and columns beyond
// `dim` zero, so padded products add exact zeros. 16-byte loads where source rows allow.
template <typename T, int kD, int kRows>
__device__ void load_tile(T* dst, int ld, const T* src, int64_t row_stride, int valid, int dim) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kChunks = kD / kVec;
  const bool vector = reinterpret_cast<uintptr_t>(src) % 16 == 0 && row_stride % kVec == 0;
  for (int c = threadIdx.x; c < kRows * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * kVec;
    T* d = dst + r * ld + col;
    if (r < valid && vector && col + kVec <= dim) {
      *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(src + r * row_stride + col);
    } else {
      for (int e = 0; e < kVec; ++e) {
        d[e] = r < valid && col + e < dim ? src[r * row_stride + col + e] : from_f32<T>(0.0f);
      }
    }
  }
}

// dst (16 x kMmaKeys f32, row stride ld_s) = a (16 x kD) times b (kMmaKeys x kD) transposed,
// both T at row stride ld_t: one warp's rows of Q K^T or dO V^T.
template <typename T, int kD>
__device__ void warp_product_nt(const T* a, const T* b, float* dst) {
  using L = MmaLayout<kD>;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kMmaKeys / 16];
#pragma unroll
  for (int n = 0; n < kMmaKeys / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int kk = 0; kk < kD; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + kk, L::ld_t);
#pragma unroll
    for (int n = 0; n < kMmaKeys / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
      wmma::load_matrix_sync(fb, b + n * 16 * L::ld_t + kk, L::ld_t);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kMmaKeys / 16; ++n) {
    wmma::store_matrix_sync(dst + n * 16, acc[n], L::ld_s, wmma::mem_row_major);
  }
}

// acc (16 x 16) += a (16 x kMmaKeys, row stride ld_p) times b (kMmaKeys x 16, row stride ld_t):
// one warp's P V or dS K columns.
template <typename T, int kD>
__device__ void warp_product_nn(const T* a, const T* b,
                                wmma::fragment<wmma::accumulator, 16, 16, 16, float>& acc) {
  using L = MmaLayout<kD>;
#pragma unroll
  for (int kk = 0; kk < kMmaKeys; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, a + kk, L::ld_p);
    wmma::load_matrix_sync(fb, b + kk * L::ld_t, L::ld_t);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

template <typename T, int kD>
constexpr size_t mma_forward_smem() {
  using L = MmaLayout<kD>;
  return (kMmaRows + 2 * kMmaKeys) * L::ld_t * sizeof(T) + kMmaRows * L::ld_s * sizeof(float) +
         kMmaRows * L::ld_p * sizeof(T) + kMmaRows * L::ld_o * sizeof(float);
}

// One block per (b * q_heads + h, query tile); each warp owns 16 query rows: their scores, online
// softmax state (m, l, the same in every lane) and output accumulator rows in shared memory.
template <typename T, int kD>
__global__ void __launch_bounds__(kMmaThreads)
    mma_forward_kernel(Params p, OutOperand out, float* lse) {
  using L = MmaLayout<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + kMmaRows * L::ld_t;
  T* sv = sk + kMmaKeys * L::ld_t;
  float* ss = reinterpret_cast<float*>(sv + kMmaKeys * L::ld_t);
  T* sp = reinterpret_cast<T*>(ss + kMmaRows * L::ld_s);
  float* so = reinterpret_cast<float*>(sp + kMmaRows * L::ld_p);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / p.q_heads, h = bh % p.q_heads, kvh = h / p.group;
  // Causal tiles differ in cost: the longest (last) run first.
  const int64_t i0 = (int64_t{gridDim.y} - 1 - blockIdx.y) * kMmaRows;
  const int rows = static_cast<int>(min64(kMmaRows, p.q_len - i0));
  const int dim = static_cast<int>(p.dim);

  load_tile<T, kD, kMmaRows>(sq, L::ld_t, row_of<T>(p.q, b, h, i0), p.q.row_stride, rows, dim);
  for (int e = threadIdx.x; e < kMmaRows * L::ld_o; e += blockDim.x) so[e] = 0.0f;
  float m[16], l[16];
#pragma unroll
  for (int rr = 0; rr < 16; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
  }
  const int64_t key_end = p.causal ? min64(p.kv_len, i0 + rows) : p.kv_len;
  for (int64_t j0 = first_key_tile(p, b, i0, kMmaKeys); j0 < key_end; j0 += kMmaKeys) {
    const int bc = static_cast<int>(min64(kMmaKeys, key_end - j0));
    __syncthreads();  // the previous tile's K and V are no longer read
    load_tile<T, kD, kMmaKeys>(sk, L::ld_t, row_of<T>(p.k, b, kvh, j0), p.k.row_stride, bc, dim);
    load_tile<T, kD, kMmaKeys>(sv, L::ld_t, row_of<T>(p.v, b, kvh, j0), p.v.row_stride, bc, dim);
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
    warp_product_nt<T, kD>(sq + warp * 16 * L::ld_t, sk, ss + warp * 16 * L::ld_s);
    __syncwarp();

    // Online softmax, one row at a time across the warp (lane: keys lane and lane + 32).
#pragma unroll
    for (int rr = 0; rr < 16; ++rr) {
      const int r = warp * 16 + rr;
      const int64_t i = i0 + r;
      // The same in every lane.
      const KeyRange keys = r < rows ? visible_keys(p, b, i, j0, bc) : KeyRange{0, 0};
      T* prow = sp + r * L::ld_p;
      if (keys.begin == keys.end) {
        prow[lane] = from_f32<T>(0.0f);
        prow[lane + 32] = from_f32<T>(0.0f);
        continue;
      }
      const bool in0 = lane >= keys.begin && lane < keys.end;
      const bool in1 = lane + 32 >= keys.begin && lane + 32 < keys.end;
      const float* srow = ss + r * L::ld_s;
      const float s0 = in0 ? score_of(p, srow[lane]) : -INFINITY;
      const float s1 = in1 ? score_of(p, srow[lane + 32]) : -INFINITY;
      const float mx = fmaxf(warp_max(fmaxf(s0, s1)), m[rr]);
      const float correction = exp_approx(m[rr] - mx);
      float p0 = in0 ? exp_approx(s0 - mx) : 0.0f;
      float p1 = in1 ? exp_approx(s1 - mx) : 0.0f;
      l[rr] = l[rr] * correction + warp_sum(p0 + p1);
      m[rr] = mx;
      if (correction != 1.0f) {
        for (int e = lane; e < kD; e += 32) so[r * L::ld_o + e] *= correction;
      }
      if (p.dropout_p > 0.0f) {
        if (in0) p0 *= dropout_factor(p, b, h, i, j0 + lane);
        if (in1) p1 *= dropout_factor(p, b, h, i, j0 + lane + 32);
      }
      prow[lane] = from_f32<T>(p0);
      prow[lane + 32] = from_f32<T>(p1);
    }
    __syncwarp();

    // O += P V for this warp's rows, the accumulator kept in shared memory (the rescale above
    // needs its rows, which a wmma fragment does not expose).
#pragma unroll
    for (int nd = 0; nd < kD / 16; ++nd) {
      float* otile = so + warp * 16 * L::ld_o + nd * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
      wmma::load_matrix_sync(o, otile, L::ld_o, wmma::mem_row_major);
      warp_product_nn<T, kD>(sp + warp * 16 * L::ld_p, sv + nd * 16, o);
      wmma::store_matrix_sync(otile, o, L::ld_o, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncthreads();  // other warps zeroed these accumulator rows when no key tile ran (kv_len 0)
  const int64_t row0 = bh * p.q_len + i0;
#pragma unroll
  for (int rr = 0; rr < 16; ++rr) {
    const int r = warp * 16 + rr;
    if (r >= rows) break;
    // l is 0 only when a row sees no key (kv_len 0): its output stays 0.
    const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;
    T* orow = row_at<T>(out, b, h, i0 + r);
    for (int e = lane; e < dim; e += 32) orow[e] = from_f32<T>(so[r * L::ld_o + e] * inv);
    if (lane == 0) lse[row0 + r] = m[rr] + logf(l[rr]);
  }
}

template <typename T, int kD>
constexpr size_t mma_backward_smem() {
  using L = MmaLayout<kD>;
  return (2 * kMmaKeys + 2 * kMmaRows) * L::ld_t * sizeof(T) +
         2 * kMmaRows * L::ld_s * sizeof(float) + 2 * kMmaRows * L::ld_p * sizeof(T) +
         2 * kMmaRows * sizeof(float);
}

// What a backward kernel reads and writes besides Params.
struct BackwardArgs {
  Operand grad_out;  // [B, Hq, Tq, D]
  const float* lse;
  const float* delta;
  OutOperand dq;  // f32 [B, Hq, Tq, D], zeroed, accumulated with atomicAdd
  OutOperand grad_k;
  OutOperand grad_v;
};

// Writes a warp's 16 x 16 f32 fragment, times `factor`, as its rows [0, 16) (those below
// `rows`) and columns [col0, col0 + 16) (those below dim) of the T rows at dst, ld_dst apart.
template <typename T>
__device__ void store_fragment(const wmma::fragment<wmma::accumulator, 16, 16, 16, float>& f,
                               float* scratch, int ld, T* dst, int64_t ld_dst, int rows, int col0,
                               int dim, float factor) {
  const int lane = threadIdx.x % 32;
  wmma::store_matrix_sync(scratch, f, ld, wmma::mem_row_major);
  __syncwarp();
  for (int idx = lane; idx < 256; idx += 32) {
    const int rr = idx / 16, cc = idx % 16;
    if (rr < rows && col0 + cc < dim) {
      dst[rr * ld_dst + col0 + cc] = from_f32<T>(scratch[rr * ld + cc] * factor);
    }
  }
  __syncwarp();
}

// One block per (b * kv_heads + kvh, key tile): dK and dV of its 64 keys in registers (each warp
// 16 keys), summed over the group's query heads and query tiles in order; each step's dQ
// contribution added to args.dq.
template <typename T, int kD>
__global__ void __launch_bounds__(kMmaThreads) mma_backward_kernel(Params p, BackwardArgs args) {
  using L = MmaLayout<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);
  T* sv = sk + kMmaKeys * L::ld_t;
  T* sq = sv + kMmaKeys * L::ld_t;
  T* sdo = sq + kMmaRows * L::ld_t;
  float* ss = reinterpret_cast<float*>(sdo + kMmaRows * L::ld_t);
  float* sdp = ss + kMmaRows * L::ld_s;
  T* sp = reinterpret_cast<T*>(sdp + kMmaRows * L::ld_s);
  T* sds = sp + kMmaRows * L::ld_p;
  float* slse = reinterpret_cast<float*>(sds + kMmaRows * L::ld_p);
  float* sdelta = slse + kMmaRows;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bkv = blockIdx.x, b = bkv / p.kv_heads, kvh = bkv % p.kv_heads;
  const int64_t j0 = int64_t{blockIdx.y} * kMmaKeys;
  const int bc = static_cast<int>(min64(kMmaKeys, p.kv_len - j0));
  const int dim = static_cast<int>(p.dim);
  float* scratch = ss + warp * 16 * L::ld_s;  // this warp's rows of ss, once scores are read

  load_tile<T, kD, kMmaKeys>(sk, L::ld_t, row_of<T>(p.k, b, kvh, j0), p.k.row_stride, bc, dim);
  load_tile<T, kD, kMmaKeys>(sv, L::ld_t, row_of<T>(p.v, b, kvh, j0), p.v.row_stride, bc, dim);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[kD / 16], dv[kD / 16];
#pragma unroll
  for (int nd = 0; nd < kD / 16; ++nd) {
    wmma::fill_fragment(dk[nd], 0.0f);
    wmma::fill_fragment(dv[nd], 0.0f);
  }
  for (int64_t h = kvh * p.group; h < (kvh + 1) * p.group; ++h) {
    // Causal: query tiles before j0 see none of these keys (kMmaRows == kMmaKeys), nor do those
    // past the window's end.
    const int64_t rows_end = query_end(p, b, j0, bc);
    for (int64_t i0 = p.causal ? j0 : 0; i0 < rows_end; i0 += kMmaRows) {
      const int rows = static_cast<int>(min64(kMmaRows, p.q_len - i0));
      const int64_t row0 = (b * p.q_heads + h) * p.q_len + i0;
      __syncthreads();  // the previous step's Q, dO, P, dS and scratch are no longer read
      load_tile<T, kD, kMmaRows>(sq, L::ld_t, row_of<T>(p.q, b, h, i0), p.q.row_stride, rows, dim);
      load_tile<T, kD, kMmaRows>(sdo, L::ld_t, row_of<T>(args.grad_out, b, h, i0),
                                 args.grad_out.row_stride, rows, dim);
      for (int r = threadIdx.x; r < kMmaRows; r += blockDim.x) {
        slse[r] = r < rows ? args.lse[row0 + r] : 0.0f;
        sdelta[r] = r < rows ? args.delta[row0 + r] : 0.0f;
      }
      __syncthreads();

      // S = Q K^T, then dP = dO V^T, for this warp's 16 query rows (one after the other: the
      // dK / dV fragments already hold most of the registers).
      warp_product_nt<T, kD>(sq + warp * 16 * L::ld_t, sk, ss + warp * 16 * L::ld_s);
      warp_product_nt<T, kD>(sdo + warp * 16 * L::ld_t, sv, sdp + warp * 16 * L::ld_s);
      __syncwarp();

      // P (dropped and scaled) and dS = P * (dP - delta), masked entries 0 (CPU: block_grads).
      for (int idx = lane; idx < 16 * kMmaKeys; idx += 32) {
        const int r = warp * 16 + idx / kMmaKeys, c = idx % kMmaKeys;
        const int64_t i = i0 + r, j = j0 + c;
        float pk = 0.0f, ds = 0.0f;
        if (r < rows && c < bc && visible(p, b, i, j)) {
          const float dot = ss[r * L::ld_s + c];
          const float prob = exp_approx(score_of(p, dot) - slse[r]);
          const float dpv = sdp[r * L::ld_s + c];
          if (p.dropout_p > 0.0f) {
            const float keep = dropout_factor(p, b, h, i, j);
            ds = prob * (dpv * keep - sdelta[r]);
            pk = prob * keep;
          } else {
            ds = prob * (dpv - sdelta[r]);
            pk = prob;
          }
          ds *= cap_slope(p, dot);
        }
        sp[r * L::ld_p + c] = from_f32<T>(pk);
        sds[r * L::ld_p + c] = from_f32<T>(ds);
      }
      __syncthreads();  // every warp reads all of P and dS below

      // dV += P^T dO and dK += dS^T Q for this warp's 16 keys.
#pragma unroll
      for (int kk = 0; kk < kMmaRows; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> pt, dst;
        wmma::load_matrix_sync(pt, sp + kk * L::ld_p + warp * 16, L::ld_p);
        wmma::load_matrix_sync(dst, sds + kk * L::ld_p + warp * 16, L::ld_p);
#pragma unroll
        for (int nd = 0; nd < kD / 16; ++nd) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bdo, bq;
          wmma::load_matrix_sync(bdo, sdo + kk * L::ld_t + nd * 16, L::ld_t);
          wmma::load_matrix_sync(bq, sq + kk * L::ld_t + nd * 16, L::ld_t);
          wmma::mma_sync(dv[nd], pt, bdo, dv[nd]);
          wmma::mma_sync(dk[nd], dst, bq, dk[nd]);
        }
      }

      // dQ += scale * dS K for this warp's 16 query rows, through its scratch rows of ss.
      if (warp * 16 < rows) {
#pragma unroll
        for (int nd = 0; nd < kD / 16; ++nd) {
          if (nd * 16 >= dim) break;
          wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq;
          wmma::fill_fragment(dq, 0.0f);
          warp_product_nn<T, kD>(sds + warp * 16 * L::ld_p, sk + nd * 16, dq);
          wmma::store_matrix_sync(scratch, dq, L::ld_s, wmma::mem_row_major);
          __syncwarp();
          for (int idx = lane; idx < 256; idx += 32) {
            const int r = warp * 16 + idx / 16, e = nd * 16 + idx % 16;
            if (r < rows && e < dim) {
              atomicAdd(row_at<float>(args.dq, b, h, i0 + r) + e,
                        p.scale * scratch[(idx / 16) * L::ld_s + idx % 16]);
            }
          }
          __syncwarp();
        }
      }
    }
  }
  // dK = scale * dS^T Q and dV, written through this warp's scratch rows (no other warp touches
  // them any more).
  const int keys = bc - warp * 16;
  T* gv = row_at<T>(args.grad_v, b, kvh, j0 + warp * 16);
  T* gk = row_at<T>(args.grad_k, b, kvh, j0 + warp * 16);
#pragma unroll
  for (int nd = 0; nd < kD / 16; ++nd) {
    store_fragment(dv[nd], scratch, L::ld_s, gv, args.grad_v.row_stride, keys, nd * 16, dim, 1.0f);
    store_fragment(dk[nd], scratch, L::ld_s, gk, args.grad_k.row_stride, keys, nd * 16, dim,
                   p.scale);
  }
}

// ---------------------------------------------------------------------------------------------
// CUDA-core kernels (any dtype, head size padded to kD = 64, 128 or 256), fp32 in shared memory.

constexpr int kCoreThreads = 128;
constexpr int kCoreRows = 16;                         // forward: query rows per block
constexpr int kCoreKeys = 32;                         // forward: keys per tile
constexpr int kCoreBackRows = 32;                     // backward: query rows per tile
constexpr int kCoreBackKeys = 16;                     // backward: keys per block
constexpr int kCoreParts = kCoreThreads / kCoreRows;  // threads per output row (8)
static_assert(kCoreThreads / kCoreBackKeys == kCoreParts);

// rows x dim tile as f32 at row stride kD + 1 (conflict-free column reads), zero beyond `valid`
// rows and `dim` columns.
template <typename T, int kD>
__device__ void load_tile_f32(float* dst, int rows_in_tile, const T* src, int64_t row_stride,
                              int valid, int dim) {
  for (int idx = threadIdx.x; idx < rows_in_tile * kD; idx += blockDim.x) {
    const int r = idx / kD, e = idx % kD;
    dst[r * (kD + 1) + e] = r < valid && e < dim ? to_f32(src[r * row_stride + e]) : 0.0f;
  }
}

template <int kD>
constexpr size_t core_forward_smem() {
  return ((kCoreRows + 2 * kCoreKeys) * (kD + 1) + kCoreRows * (kCoreKeys + 1) + 2 * kCoreRows) *
         sizeof(float);
}

// One block per (b * q_heads + h, 16 query rows). Thread t owns output row t / 8, columns
// t % 8 + 8 m, in registers; threads 0..15 run the softmax of one row each.
template <typename T, int kD>
__global__ void __launch_bounds__(kCoreThreads)
    core_forward_kernel(Params p, OutOperand out, float* lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = kD + 1, ld_s = kCoreKeys + 1, kCols = kD / kCoreParts;
  float* sq = reinterpret_cast<float*>(smem);
  float* sk = sq + kCoreRows * ld;
  float* sv = sk + kCoreKeys * ld;
  float* ss = sv + kCoreKeys * ld;
  float* scorrection = ss + kCoreRows * ld_s;
  float* sinv = scorrection + kCoreRows;

  const int t = threadIdx.x;
  const int64_t bh = blockIdx.x, b = bh / p.q_heads, h = bh % p.q_heads, kvh = h / p.group;
  const int64_t i0 = (int64_t{gridDim.y} - 1 - blockIdx.y) * kCoreRows;
  const int rows = static_cast<int>(min64(kCoreRows, p.q_len - i0));
  const int dim = static_cast<int>(p.dim);
  load_tile_f32<T, kD>(sq, kCoreRows, row_of<T>(p.q, b, h, i0), p.q.row_stride, rows, dim);

  const int my_row = t / kCoreParts, part = t % kCoreParts;
  float o[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) o[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // softmax state of row t (threads t < kCoreRows)

  const int64_t key_end = p.causal ? min64(p.kv_len, i0 + rows) : p.kv_len;
  for (int64_t j0 = first_key_tile(p, b, i0, kCoreKeys); j0 < key_end; j0 += kCoreKeys) {
    const int bc = static_cast<int>(min64(kCoreKeys, key_end - j0));
    __syncthreads();
    load_tile_f32<T, kD>(sk, kCoreKeys, row_of<T>(p.k, b, kvh, j0), p.k.row_stride, bc, dim);
    load_tile_f32<T, kD>(sv, kCoreKeys, row_of<T>(p.v, b, kvh, j0), p.v.row_stride, bc, dim);
    __syncthreads();
    for (int idx = t; idx < kCoreRows * kCoreKeys; idx += blockDim.x) {
      const int r = idx / kCoreKeys, c = idx % kCoreKeys;
      float dot = 0.0f;
      for (int e = 0; e < dim; ++e) dot += sq[r * ld + e] * sk[c * ld + e];
      ss[r * ld_s + c] = score_of(p, dot);
    }
    __syncthreads();
    if (t < kCoreRows) {
      const int64_t i = i0 + t;
      const KeyRange keys = t < rows ? visible_keys(p, b, i, j0, bc) : KeyRange{0, 0};
      float* srow = ss + t * ld_s;
      float correction = 1.0f;
      if (keys.begin < keys.end) {
        float mx = m;
        for (int c = keys.begin; c < keys.end; ++c) mx = fmaxf(mx, srow[c]);
        correction = exp_approx(m - mx);
        float sum = 0.0f;
        for (int c = keys.begin; c < keys.end; ++c) {
          srow[c] = exp_approx(srow[c] - mx);
          sum += srow[c];
        }
        l = l * correction + sum;
        m = mx;
        if (p.dropout_p > 0.0f) {
          for (int c = keys.begin; c < keys.end; ++c) {
            srow[c] *= dropout_factor(p, b, h, i, j0 + c);
          }
        }
      }
      for (int c = 0; c < keys.begin; ++c) srow[c] = 0.0f;
      for (int c = keys.end; c < kCoreKeys; ++c) srow[c] = 0.0f;
      scorrection[t] = correction;
    }
    __syncthreads();
    const float correction = scorrection[my_row];
    const float* prow = ss + my_row * ld_s;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int e = part + kCoreParts * c;
      float acc = 0.0f;
      for (int j = 0; j < kCoreKeys; ++j) acc += prow[j] * sv[j * ld + e];
      o[c] = o[c] * correction + acc;
    }
  }
  if (t < kCoreRows) {
    // l is 0 only when a row sees no key (kv_len 0): its output stays 0.
    sinv[t] = l > 0.0f ? 1.0f / l : 0.0f;
    if (t < rows) lse[bh * p.q_len + i0 + t] = m + logf(l);
  }
  __syncthreads();
  if (my_row < rows) {
    T* orow = row_at<T>(out, b, h, i0 + my_row);
    const float inv = sinv[my_row];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int e = part + kCoreParts * c;
      if (e < dim) orow[e] = from_f32<T>(o[c] * inv);
    }
  }
}

template <int kD>
constexpr size_t core_backward_smem() {
  return ((2 * kCoreBackKeys + 2 * kCoreBackRows) * (kD + 1) +
          2 * kCoreBackRows * (kCoreBackKeys + 1) + 2 * kCoreBackRows) *
         sizeof(float);
}

// One block per (b * kv_heads + kvh, 16 keys). Thread t owns dK / dV row t / 8, columns
// t % 8 + 8 m, in registers, summed over the group's query heads and 32-row query tiles in order.
template <typename T, int kD>
__global__ void __launch_bounds__(kCoreThreads) core_backward_kernel(Params p, BackwardArgs args) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = kD + 1, ld_s = kCoreBackKeys + 1, kCols = kD / kCoreParts;
  float* sk = reinterpret_cast<float*>(smem);
  float* sv = sk + kCoreBackKeys * ld;
  float* sq = sv + kCoreBackKeys * ld;
  float* sdo = sq + kCoreBackRows * ld;
  float* sp = sdo + kCoreBackRows * ld;
  float* sds = sp + kCoreBackRows * ld_s;
  float* slse = sds + kCoreBackRows * ld_s;
  float* sdelta = slse + kCoreBackRows;

  const int t = threadIdx.x;
  const int64_t bkv = blockIdx.x, b = bkv / p.kv_heads, kvh = bkv % p.kv_heads;
  const int64_t j0 = int64_t{blockIdx.y} * kCoreBackKeys;
  const int bc = static_cast<int>(min64(kCoreBackKeys, p.kv_len - j0));
  const int dim = static_cast<int>(p.dim);
  load_tile_f32<T, kD>(sk, kCoreBackKeys, row_of<T>(p.k, b, kvh, j0), p.k.row_stride, bc, dim);
  load_tile_f32<T, kD>(sv, kCoreBackKeys, row_of<T>(p.v, b, kvh, j0), p.v.row_stride, bc, dim);

  const int my_key = t / kCoreParts, part = t % kCoreParts;
  float dk[kCols], dv[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) dk[c] = dv[c] = 0.0f;

  for (int64_t h = kvh * p.group; h < (kvh + 1) * p.group; ++h) {
    // Causal: rows before j0 see none of these keys; start at the tile holding row j0, and end
    // at the window's end.
    const int64_t rows_end = query_end(p, b, j0, bc);
    for (int64_t i0 = p.causal ? j0 / kCoreBackRows * kCoreBackRows : 0; i0 < rows_end;
         i0 += kCoreBackRows) {
      const int rows = static_cast<int>(min64(kCoreBackRows, p.q_len - i0));
      const int64_t row0 = (b * p.q_heads + h) * p.q_len + i0;
      __syncthreads();
      load_tile_f32<T, kD>(sq, kCoreBackRows, row_of<T>(p.q, b, h, i0), p.q.row_stride, rows, dim);
      load_tile_f32<T, kD>(sdo, kCoreBackRows, row_of<T>(args.grad_out, b, h, i0),
                           args.grad_out.row_stride, rows, dim);
      for (int r = t; r < kCoreBackRows; r += blockDim.x) {
        slse[r] = r < rows ? args.lse[row0 + r] : 0.0f;
        sdelta[r] = r < rows ? args.delta[row0 + r] : 0.0f;
      }
      __syncthreads();
      for (int idx = t; idx < kCoreBackRows * kCoreBackKeys; idx += blockDim.x) {
        const int r = idx / kCoreBackKeys, c = idx % kCoreBackKeys;
        const int64_t i = i0 + r, j = j0 + c;
        float pk = 0.0f, ds = 0.0f;
        if (r < rows && c < bc && visible(p, b, i, j)) {
          float s = 0.0f, dpv = 0.0f;
          for (int e = 0; e < dim; ++e) {
            s += sq[r * ld + e] * sk[c * ld + e];
            dpv += sdo[r * ld + e] * sv[c * ld + e];
          }
          const float prob = exp_approx(score_of(p, s) - slse[r]);
          if (p.dropout_p > 0.0f) {
            const float keep = dropout_factor(p, b, h, i, j);
            ds = prob * (dpv * keep - sdelta[r]);
            pk = prob * keep;
          } else {
            ds = prob * (dpv - sdelta[r]);
            pk = prob;
          }
          ds *= cap_slope(p, s);
        }
        sp[r * ld_s + c] = pk;
        sds[r * ld_s + c] = ds;
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int e = part + kCoreParts * c;
        float acc_v = 0.0f, acc_k = 0.0f;
        for (int r = 0; r < kCoreBackRows; ++r) {
          acc_v += sp[r * ld_s + my_key] * sdo[r * ld + e];
          acc_k += sds[r * ld_s + my_key] * sq[r * ld + e];
        }
        dv[c] += acc_v;
        dk[c] += acc_k;
      }
      for (int idx = t; idx < rows * dim; idx += blockDim.x) {
        const int r = idx / dim, e = idx % dim;
        float acc = 0.0f;
        for (int c = 0; c < kCoreBackKeys; ++c) acc += sds[r * ld_s + c] * sk[c * ld + e];
        atomicAdd(row_at<float>(args.dq, b, h, i0 + r) + e, p.scale * acc);
      }
    }
  }
  if (my_key < bc) {
    T* gk = row_at<T>(args.grad_k, b, kvh, j0 + my_key);
    T* gv = row_at<T>(args.grad_v, b, kvh, j0 + my_key);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int e = part + kCoreParts * c;
      if (e < dim) {
        gk[e] = from_f32<T>(dk[c] * p.scale);
        gv[e] = from_f32<T>(dv[c]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward's small kernels

// delta[row] = sum_e out[row, e] * grad_out[row, e], one warp per row, in a fixed order.
template <typename T>
__global__ void delta_kernel(Operand out, Operand grad_out, int64_t heads, int64_t len,
                             int64_t rows, int64_t dim, float* delta) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; row < rows;
       row += warps) {
    const T* o = static_cast<const T*>(out.data) + row_offset(out, row, heads, len);
    const T* g = static_cast<const T*>(grad_out.data) + row_offset(grad_out, row, heads, len);
    float sum = 0.0f;
    for (int64_t e = lane; e < dim; e += 32) sum += to_f32(o[e]) * to_f32(g[e]);
    sum = warp_sum(sum);
    if (lane == 0) delta[row] = sum;
  }
}

// dst's rows (any strides, unit in D) = the contiguous f32 rows of src, rounded.
template <typename T>
__global__ void round_kernel(const float* src, int64_t heads, int64_t len, int64_t dim, int64_t n,
                             OutOperand dst) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    static_cast<T*>(dst.data)[row_offset(dst, i / dim, heads, len) + i % dim] = from_f32<T>(src[i]);
  }
}

// Zeroes the f32 rows of dst (any strides, unit in D).
__global__ void zero_rows_kernel(int64_t heads, int64_t len, int64_t dim, int64_t n,
                                 OutOperand dst) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    static_cast<float*>(dst.data)[row_offset(dst, i / dim, heads, len) + i % dim] = 0.0f;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side

Operand operand(const Tensor& x) { return {x.data_ptr(), x.stride(0), x.stride(1), x.stride(2)}; }
OutOperand out_operand(const Tensor& x) {
  return {x.data_ptr(), x.stride(0), x.stride(1), x.stride(2)};
}

Params make_params(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, int64_t window,
                   float scale, float softcap, const DropoutParams& dropout,
                   const AttentionSequences& sequences) {
  Params p;
  p.batch = q.size(0);
  p.q_heads = q.size(1);
  p.kv_heads = k.size(1);
  p.q_len = q.size(2);
  p.kv_len = k.size(2);
  p.dim = q.size(3);
  p.group = p.q_heads / p.kv_heads;
  p.q = operand(q);
  p.k = operand(k);
  p.v = operand(v);
  p.causal = causal;
  p.window = window;
  p.scale = scale;
  p.softcap = softcap;
  p.dropout_p = dropout.p;
  p.keep_scale = dropout.p > 0.0f ? 1.0f / (1.0f - dropout.p) : 1.0f;
  p.seed = dropout.seed;
  p.offset = dropout.offset;
  p.cu_seqlens =
      sequences.packed() ? static_cast<const int32_t*>(sequences.cu_seqlens.data_ptr()) : nullptr;
  p.num_seqs = sequences.packed() ? sequences.cu_seqlens.numel() - 1 : 0;
  return p;
}

void check_problem(const char* entry, const Tensor& q, const Tensor& k, const Tensor& v,
                   bool causal, int64_t window, float softcap,
                   const AttentionSequences& sequences) {
  check_attention_sequences(entry, q, k, causal, sequences);
  if (window < 0 || (window > 0 && !causal)) {
    throw ValueError(str_cat(entry, ": window ", window, " needs causal and must be positive"));
  }
  if (!(softcap >= 0.0f)) {
    throw ValueError(str_cat(entry, ": softcap ", softcap, " must be positive, or 0 for none"));
  }
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    throw ValueError(str_cat(entry, ": q, k and v must share a dtype"));
  }
  check_kernel_dtype(entry, "q", q.dtype());
  const bool unit = (q.size(3) <= 1 || q.stride(3) == 1) && (k.size(3) <= 1 || k.stride(3) == 1) &&
                    (v.size(3) <= 1 || v.stride(3) == 1);
  if (!unit) throw ValueError(str_cat(entry, ": q, k and v need a unit stride in the head dim"));
  if (q.size(3) > 256) {
    throw NotImplementedError(
        str_cat(entry, ": head size ", q.size(3), " exceeds the CUDA kernels' limit of 256"));
  }
}

// Grid of (heads, tiles) with the tile count within gridDim.y's limit.
dim3 grid_of(int64_t heads, int64_t tiles, const char* entry) {
  if (tiles > 65535 || heads > (int64_t{1} << 31) - 1) {
    throw NotImplementedError(
        str_cat(entry, ": ", tiles, " tiles of ", heads, " heads exceed the CUDA grid"));
  }
  return dim3(static_cast<unsigned>(heads), static_cast<unsigned>(tiles));
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  HEADROOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
}

// The padded head size of a kernel: 64, 128 or 256.
int padded_dim(int64_t dim) { return dim <= 64 ? 64 : dim <= 128 ? 128 : 256; }

// Tensor cores for bf16 / f16 up to head size 128, CUDA cores otherwise.
bool uses_mma(DType dtype, int64_t dim) { return dtype != DType::f32 && dim <= 128; }

template <typename T, int kD>
void launch_forward(const Params& p, const Tensor& out, const Tensor& lse) {
  const OutOperand o = out_operand(out);
  float* l = static_cast<float*>(lse.data_ptr());
  if constexpr (sizeof(T) == 2 && kD <= 128) {
    if (uses_mma(out.dtype(), p.dim)) {
      constexpr size_t smem = mma_forward_smem<T, kD>();
      allow_smem(mma_forward_kernel<T, kD>, smem);
      mma_forward_kernel<T, kD>
          <<<grid_of(p.batch * p.q_heads, ceil_div(p.q_len, kMmaRows), "attention_forward"),
             kMmaThreads, smem, current_stream()>>>(p, o, l);
      check_launch();
      return;
    }
  }
  constexpr size_t smem = core_forward_smem<kD>();
  allow_smem(core_forward_kernel<T, kD>, smem);
  core_forward_kernel<T, kD>
      <<<grid_of(p.batch * p.q_heads, ceil_div(p.q_len, kCoreRows), "attention_forward"),
         kCoreThreads, smem, current_stream()>>>(p, o, l);
  check_launch();
}

template <typename T, int kD>
void launch_backward(const Params& p, const BackwardArgs& args, DType dtype) {
  if constexpr (sizeof(T) == 2 && kD <= 128) {
    if (uses_mma(dtype, p.dim)) {
      constexpr size_t smem = mma_backward_smem<T, kD>();
      allow_smem(mma_backward_kernel<T, kD>, smem);
      mma_backward_kernel<T, kD>
          <<<grid_of(p.batch * p.kv_heads, ceil_div(p.kv_len, kMmaKeys), "attention_backward"),
             kMmaThreads, smem, current_stream()>>>(p, args);
      check_launch();
      return;
    }
  }
  constexpr size_t smem = core_backward_smem<kD>();
  allow_smem(core_backward_kernel<T, kD>, smem);
  core_backward_kernel<T, kD>
      <<<grid_of(p.batch * p.kv_heads, ceil_div(p.kv_len, kCoreBackKeys), "attention_backward"),
         kCoreThreads, smem, current_stream()>>>(p, args);
  check_launch();
}

// Runs body<T, kD>() for q's dtype and the padded head size.
#define HEADROOM_ATTENTION_DISPATCH(dtype, dim, CALL) \
  HEADROOM_CUDA_DISPATCH_FLOAT(dtype, T, {            \
    switch (padded_dim(dim)) {                        \
      case 64: {                                      \
        constexpr int kD = 64;                        \
        CALL;                                         \
        break;                                        \
      }                                               \
      case 128: {                                     \
        constexpr int kD = 128;                       \
        CALL;                                         \
        break;                                        \
      }                                               \
      default: {                                      \
        constexpr int kD = 256;                       \
        CALL;                                         \
        break;                                        \
      }                                               \
    }                                                 \
  })

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                       int64_t window, float scale, float softcap, DropoutParams dropout,
                       const Tensor& out, const Tensor& lse, const AttentionSequences& sequences) {
  check_problem("attention_forward", q, k, v, causal, window, softcap, sequences);
  const int64_t q_rows = q.size(0) * q.size(1) * q.size(2);
  check_attention_forward_buffers("attention_forward", q, out, lse);
  if (q_rows == 0) return;
  if (cudnn_attention_forward(q, k, v, causal, window, scale, softcap, dropout, out, lse,
                              sequences)) {
    return;
  }
  DeviceGuard guard(q.device().index);
  const Params p = make_params(q, k, v, causal, window, scale, softcap, dropout, sequences);
  HEADROOM_ATTENTION_DISPATCH(q.dtype(), p.dim, (launch_forward<T, kD>(p, out, lse)));
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& grad_out, const Tensor& lse, bool causal, int64_t window,
                        float scale, float softcap, DropoutParams dropout, const Tensor& delta,
                        const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                        const Tensor& grad_q_accum, const AttentionSequences& sequences) {
  check_problem("attention_backward", q, k, v, causal, window, softcap, sequences);
  const bool f32 = q.dtype() == DType::f32;
  check_attention_backward_buffers("attention_backward", q, k, out, grad_out, lse, delta, grad_q,
                                   grad_k, grad_v, grad_q_accum);
  if (cudnn_attention_backward(q, k, v, out, grad_out, lse, causal, window, scale, softcap, dropout,
                               delta, grad_q, grad_k, grad_v, grad_q_accum, sequences)) {
    return;
  }
  DeviceGuard guard(q.device().index);
  cudaStream_t stream = current_stream();
  // dQ is accumulated in fp32: in grad_q itself (at its strides) for f32, else in the contiguous
  // grad_q_accum, rounded into grad_q below.
  const Tensor& accum = f32 ? grad_q : grad_q_accum;
  const int64_t n = grad_q.numel();
  if (n > 0) {
    if (accum.is_contiguous()) {
      HEADROOM_CUDA_CHECK(cudaMemsetAsync(accum.data_ptr(), 0, n * sizeof(float), stream));
    } else {
      zero_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(q.size(1), q.size(2), q.size(3), n,
                                                               out_operand(accum));
      check_launch();
    }
  }
  const Params p = make_params(q, k, v, causal, window, scale, softcap, dropout, sequences);
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  if (rows > 0) {
    HEADROOM_CUDA_DISPATCH_FLOAT(q.dtype(), T, {
      delta_kernel<T><<<blocks_for(rows * 32), kThreads, 0, stream>>>(
          operand(out), operand(grad_out), p.q_heads, p.q_len, rows, p.dim,
          static_cast<float*>(delta.data_ptr()));
    });
    check_launch();
  }
  const BackwardArgs args{operand(grad_out),
                          static_cast<const float*>(lse.data_ptr()),
                          static_cast<const float*>(delta.data_ptr()),
                          out_operand(accum),
                          out_operand(grad_k),
                          out_operand(grad_v)};
  if (grad_k.numel() > 0) {
    HEADROOM_ATTENTION_DISPATCH(q.dtype(), p.dim, (launch_backward<T, kD>(p, args, q.dtype())));
  }
  if (!f32 && n > 0) {
    HEADROOM_CUDA_DISPATCH_FLOAT(q.dtype(), T, {
      round_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<const float*>(grad_q_accum.data_ptr()), p.q_heads, p.q_len, p.dim, n,
          out_operand(grad_q));
    });
    check_launch();
  }
}

}  // namespace

void fill_attention_kernels(AttentionKernels& kernels) {
  kernels.forward = attention_forward;
  kernels.backward = attention_backward;
}

}  // namespace headroom::cuda
