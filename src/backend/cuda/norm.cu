// LayerNorm / RMSNorm on CUDA, the formulas of backend/cpu/norm.cpp in the tensors' own dtypes.
// Forward runs one warp per row (fp32 statistics, two passes over the row for them, one to write
// it). Backward runs one thread block per block of rows: it writes dx and its rows' partial sums
// of dy * x-hat and dy; a second kernel adds the partials over blocks, block 0 first, so dweight
// and dbias repeat bit for bit without float atomics.
#include <algorithm>
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/row_access.h"
#include "backend/cuda/backend_parts.h"

namespace headroom::cuda {
namespace {

constexpr int kForwardWarps = 8;  // rows per forward block
constexpr int kBackwardThreads = 256;
constexpr int kBackwardWarps = kBackwardThreads / kWarpSize;
// Rows per backward block, and the most blocks: ~16K tokens fill 512 blocks, about four per SM
// of an H100, while the partials ([blocks, 2, dim] f32) stay a fraction of the activations.
// A block keeps its partial sums in shared memory up to this size (dim <= 5120), else in its
// slice of the partial buffer in global memory (each column is owned by one thread either way).
constexpr size_t kMaxSharedPartialBytes = 40 << 10;

// The dtype of a residual add's branch: x's own, or bf16 / f16 added to an f32 residual (a
// projection's 16-bit output under autocast), read through one warp-uniform switch.
enum class BranchType : int { same, bf16, f16 };

template <typename TX, int N>
__device__ __forceinline__ void load_branch(const void* branch, BranchType type, int64_t pack,
                                            float (&v)[N]) {
  if (type == BranchType::bf16) {
    const auto p = load_pack<__nv_bfloat16, N>(static_cast<const __nv_bfloat16*>(branch), pack);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = to_f32(p.v[i]);
  } else if (type == BranchType::f16) {
    const auto p = load_pack<__half, N>(static_cast<const __half*>(branch), pack);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = to_f32(p.v[i]);
  } else {
    const auto p = load_pack<TX, N>(static_cast<const TX*>(branch), pack);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = to_f32(p.v[i]);
  }
}

// A residual add before a norm (add_layer_norm_forward / add_rms_norm_forward): null residual
// for a norm of x alone.
struct ResidualAdd {
  const void* residual = nullptr;  // x's dtype
  const void* branch = nullptr;
  BranchType branch_type = BranchType::same;
};

// y = (x - mean) * rstd * (weight + weight_offset) + bias, one warp per row, rounded once into
// y's dtype TY (x's, or bf16 / f16 from f32 x); rms_norm is the case with no mean (centred false)
// and no bias, and Gemma's the one with weight_offset 1. With a residual add, x is first
// written as residual + branch rounded to TX, and the passes below read it back: each lane reads
// only the packs it wrote, so no synchronisation is needed.
template <typename TX, typename TW, typename TY, int N>
__global__ void norm_forward_kernel(const TX* x, ResidualAdd add, const TW* weight,
                                    float weight_offset, const TW* bias, int64_t rows, int64_t dim,
                                    float eps, bool centred, TY* out, float* mean, float* rstd) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t{blockIdx.x} * kForwardWarps + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp: no block-wide synchronisation follows
  const TX* xr = x + row * dim;
  TY* yr = out + row * dim;
  const int64_t packs = dim / N;
  const float inv_dim = 1.0f / static_cast<float>(dim);
  if (add.residual) {
    const TX* rr = static_cast<const TX*>(add.residual) + row * dim;
    const void* br =
        static_cast<const char*>(add.branch) +
        row * dim * (add.branch_type == BranchType::same ? sizeof(TX) : sizeof(__half));
    for (int64_t c = lane; c < packs; c += kWarpSize) {
      const Pack<TX, N> a = load_pack<TX, N>(rr, c);
      float b[N];
      load_branch<TX, N>(br, add.branch_type, c, b);
      Pack<TX, N> sum;
#pragma unroll
      for (int i = 0; i < N; ++i) sum.v[i] = from_f32<TX>(to_f32(a.v[i]) + b[i]);
      store_pack<TX, N>(const_cast<TX*>(xr), c, sum);
    }
  }
  float m = 0.0f;
  if (centred) {
    float s = 0.0f;
    for (int64_t c = lane; c < packs; c += kWarpSize) {
      const Pack<TX, N> p = load_pack<TX, N>(xr, c);
#pragma unroll
      for (int i = 0; i < N; ++i) s += to_f32(p.v[i]);
    }
    m = warp_sum(s) * inv_dim;
  }
  float v = 0.0f;
  for (int64_t c = lane; c < packs; c += kWarpSize) {
    const Pack<TX, N> p = load_pack<TX, N>(xr, c);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float d = to_f32(p.v[i]) - m;
      v += d * d;
    }
  }
  const float rs = 1.0f / sqrtf(warp_sum(v) * inv_dim + eps);
  if (lane == 0) {
    if (mean) mean[row] = m;
    rstd[row] = rs;
  }
  for (int64_t c = lane; c < packs; c += kWarpSize) {
    const Pack<TX, N> p = load_pack<TX, N>(xr, c);
    Pack<TW, N> w{}, b{};
    if (weight) w = load_pack<TW, N>(weight, c);
    if (bias) b = load_pack<TW, N>(bias, c);
    Pack<TY, N> y;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float value = (to_f32(p.v[i]) - m) * rs;
      if (weight) value *= to_f32(w.v[i]) + weight_offset;
      if (bias) value += to_f32(b.v[i]);
      y.v[i] = from_f32<TY>(value);
    }
    store_pack<TY, N>(yr, c, y);
  }
}

// The sums of a and c over the block, the same in every thread: warp butterflies, then the warps'
// sums added in warp order. `slot` alternates between calls (row parity), so one barrier per call
// suffices: a warp can only rewrite a slot after every warp has passed the next call's barrier.
__device__ __forceinline__ void block_sum2(float& a, float& c, float (*shared)[2][kBackwardWarps],
                                           int slot) {
  a = warp_sum(a);
  c = warp_sum(c);
  const int warp = threadIdx.x / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) {
    shared[slot][0][warp] = a;
    shared[slot][1][warp] = c;
  }
  __syncthreads();
  a = 0.0f;
  c = 0.0f;
#pragma unroll
  for (int w = 0; w < kBackwardWarps; ++w) {
    a += shared[slot][0][w];
    c += shared[slot][1][w];
  }
}

// One block of rows [b * rows / blocks, (b + 1) * rows / blocks): dx = rstd * (g - mean_g -
// x-hat * mean_gx) with g = dy * (weight + weight_offset) (mean_g is 0 without centring), and
// the block's partial
// sums of dy * x-hat and dy into partial[b] ([2, dim]) when partial is set. A thread owns the
// columns of the packs tid, tid + blockDim, ...: it alone touches their partial sums.
template <typename TX, typename TW, int N>
__global__ void __launch_bounds__(kBackwardThreads)
    norm_backward_kernel(const TX* dy, const TX* x, const TW* weight, float weight_offset,
                         const float* mean, const float* rstd, int64_t rows, int64_t dim,
                         int64_t blocks, const TX* dres, TX* dx, float* partial,
                         bool shared_partial) {
  extern __shared__ float shared_sums[];  // [2, dim] when shared_partial
  __shared__ float reduce[2][2][kBackwardWarps];
  const int64_t b = blockIdx.x;
  const int64_t begin = b * rows / blocks, end = (b + 1) * rows / blocks;
  const int64_t packs = dim / N;
  const float inv_dim = 1.0f / static_cast<float>(dim);
  float* sums = partial == nullptr ? nullptr : shared_partial ? shared_sums : partial + b * 2 * dim;
  if (sums) {
    for (int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        sums[c * N + i] = 0.0f;
        sums[dim + c * N + i] = 0.0f;
      }
    }
  }
  for (int64_t r = begin; r < end; ++r) {
    const TX* dyr = dy + r * dim;
    const TX* xr = x + r * dim;
    const float shift = mean ? mean[r] : 0.0f;
    const float rs = rstd[r];
    float mean_g = 0.0f, mean_gx = 0.0f;
    if (dx) {
      float a = 0.0f, c2 = 0.0f;
      for (int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
        const Pack<TX, N> pd = load_pack<TX, N>(dyr, c);
        const Pack<TX, N> px = load_pack<TX, N>(xr, c);
        Pack<TW, N> w{};
        if (weight) w = load_pack<TW, N>(weight, c);
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const float g =
              weight ? to_f32(pd.v[i]) * (to_f32(w.v[i]) + weight_offset) : to_f32(pd.v[i]);
          a += g;
          c2 += g * ((to_f32(px.v[i]) - shift) * rs);
        }
      }
      block_sum2(a, c2, reduce, static_cast<int>(r & 1));
      mean_g = mean ? a * inv_dim : 0.0f;
      mean_gx = c2 * inv_dim;
    }
    for (int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
      const Pack<TX, N> pd = load_pack<TX, N>(dyr, c);
      const Pack<TX, N> px = load_pack<TX, N>(xr, c);
      Pack<TW, N> w{};
      if (weight && dx) w = load_pack<TW, N>(weight, c);
      // The residual's gradient, read before dx's pack is written (dres may be dx).
      Pack<TX, N> res{};
      if (dres) res = load_pack<TX, N>(dres + r * dim, c);
      Pack<TX, N> out{};
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float d = to_f32(pd.v[i]);
        const float xhat = (to_f32(px.v[i]) - shift) * rs;
        if (dx) {
          const float g = weight ? d * (to_f32(w.v[i]) + weight_offset) : d;
          const float norm_dx = rs * (g - mean_g - xhat * mean_gx);
          out.v[i] = from_f32<TX>(dres ? to_f32(res.v[i]) + norm_dx : norm_dx);
        }
        if (sums) {
          sums[c * N + i] += d * xhat;
          sums[dim + c * N + i] += d;
        }
      }
      if (dx) store_pack<TX, N>(dx + r * dim, c, out);
    }
  }
  if (sums && shared_partial) {
    float* block_partial = partial + b * 2 * dim;
    for (int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        block_partial[c * N + i] = sums[c * N + i];
        block_partial[dim + c * N + i] = sums[dim + c * N + i];
      }
    }
  }
}

// dweight[j] (and dbias[j]) = the sum over blocks of partial[k, 0 (1), j], block 0 first.
__global__ void reduce_partials_kernel(const float* partial, int64_t blocks, int64_t dim,
                                       float* dweight, float* dbias) {
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < dim;
       j += int64_t{gridDim.x} * blockDim.x) {
    float w = 0.0f, b = 0.0f;
    for (int64_t k = 0; k < blocks; ++k) {
      w += partial[k * 2 * dim + j];
      b += partial[k * 2 * dim + dim + j];
    }
    if (dweight) dweight[j] = w;
    if (dbias) dbias[j] = b;
  }
}

struct RowShape {
  int64_t rows;
  int64_t dim;
};

RowShape row_shape(const Tensor& x) {
  const int64_t dim = x.size(-1);
  return {dim == 0 ? 0 : x.numel() / dim, dim};
}

void check_same_dtype(const char* op, const char* argument, const Tensor& t, DType dtype) {
  if (t.defined() && t.dtype() != dtype) {
    throw ValueError(str_cat(op, ": ", argument, " is ", dtype_name(t.dtype()), ", expected ",
                             dtype_name(dtype)));
  }
}

// The dtype of weight and bias (they must share it); x's when neither is given.
DType affine_dtype(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const DType dtype = weight.defined() ? weight.dtype() : bias.defined() ? bias.dtype() : x.dtype();
  check_same_dtype(op, "bias", bias, dtype);
  return dtype;
}

template <typename TX, typename TW, typename TY>
void launch_forward(const Tensor& x, const ResidualAdd& add, const Tensor& weight,
                    float weight_offset, const Tensor& bias, float eps, const Tensor& out,
                    const Tensor& mean, const Tensor& rstd) {
  const auto [rows, dim] = row_shape(x);
  const TX* xp = data_or_null<const TX>(x);
  const TW* wp = data_or_null<const TW>(weight);
  const TW* bp = data_or_null<const TW>(bias);
  TY* yp = data_or_null<TY>(out);
  constexpr int kPack = kPackOf<TX>;
  const size_t branch_size = add.branch_type == BranchType::same ? sizeof(TX) : sizeof(__half);
  const bool packed = dim % kPack == 0 && is_aligned(xp, 16) &&
                      is_aligned(yp, sizeof(TY) * kPack) && is_aligned(wp, sizeof(TW) * kPack) &&
                      is_aligned(bp, sizeof(TW) * kPack) && is_aligned(add.residual, 16) &&
                      is_aligned(add.branch, branch_size * kPack);
  const int64_t grid = (rows + kForwardWarps - 1) / kForwardWarps;
  if (grid > INT_MAX) throw ValueError(str_cat("norm forward: ", rows, " rows are too many"));
  const int threads = kForwardWarps * kWarpSize;
  float* mp = data_or_null<float>(mean);
  float* rp = data_or_null<float>(rstd);
  if (packed) {
    norm_forward_kernel<TX, TW, TY, kPack>
        <<<static_cast<int>(grid), threads, 0, current_stream()>>>(
            xp, add, wp, weight_offset, bp, rows, dim, eps, mean.defined(), yp, mp, rp);
  } else {
    norm_forward_kernel<TX, TW, TY, 1><<<static_cast<int>(grid), threads, 0, current_stream()>>>(
        xp, add, wp, weight_offset, bp, rows, dim, eps, mean.defined(), yp, mp, rp);
  }
  check_launch();
}

template <typename TX, typename TY>
void forward_for_weight(const char* op, DType wdtype, const Tensor& x, const ResidualAdd& add,
                        const Tensor& weight, float weight_offset, const Tensor& bias, float eps,
                        const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  switch (wdtype) {
    case DType::f32:
      launch_forward<TX, float, TY>(x, add, weight, weight_offset, bias, eps, out, mean, rstd);
      break;
    case DType::bf16:
      launch_forward<TX, __nv_bfloat16, TY>(x, add, weight, weight_offset, bias, eps, out, mean,
                                            rstd);
      break;
    case DType::f16:
      launch_forward<TX, __half, TY>(x, add, weight, weight_offset, bias, eps, out, mean, rstd);
      break;
    default:
      check_kernel_dtype(op, "weight", wdtype);
  }
}

// Shared by both norms: mean is undefined for rms_norm, as is bias. out is in x's dtype, or in
// bf16 / f16 for f32 x (a norm whose result a projection converts: ops/norm.h). With `add`, x is
// the sum the kernel writes first.
void norm_forward(const char* op, const Tensor& x, const ResidualAdd& add, const Tensor& weight,
                  float weight_offset, const Tensor& bias, float eps, const Tensor& out,
                  const Tensor& mean, const Tensor& rstd) {
  const DType wdtype = affine_dtype(op, x, weight, bias);
  const bool narrowed =
      x.dtype() == DType::f32 && (out.dtype() == DType::bf16 || out.dtype() == DType::f16);
  if (!narrowed) check_same_dtype(op, "out", out, x.dtype());
  if (row_shape(x).rows == 0) return;
  DeviceGuard guard(x.device().index);
  if (out.dtype() == DType::bf16 && narrowed) {
    forward_for_weight<float, __nv_bfloat16>(op, wdtype, x, add, weight, weight_offset, bias, eps,
                                             out, mean, rstd);
  } else if (narrowed) {
    forward_for_weight<float, __half>(op, wdtype, x, add, weight, weight_offset, bias, eps, out,
                                      mean, rstd);
  } else {
    HEADROOM_CUDA_DISPATCH_FLOAT(
        x.dtype(), TX,
        forward_for_weight<TX, TX>(op, wdtype, x, add, weight, weight_offset, bias, eps, out, mean,
                                   rstd));
  }
}

template <typename TX, typename TW>
void launch_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                     float weight_offset, const Tensor& mean, const Tensor& rstd,
                     const Tensor& grad_residual, const Tensor& dx, const Tensor& partial) {
  const auto [rows, dim] = row_shape(x);
  const int64_t blocks = partial.defined() ? partial.size(0) : norm_backward_blocks(rows);
  const TX* gp = data_or_null<const TX>(grad_out);
  const TX* xp = data_or_null<const TX>(x);
  const TW* wp = data_or_null<const TW>(weight);
  TX* dxp = data_or_null<TX>(dx);
  const TX* rp_grad = data_or_null<const TX>(grad_residual);
  constexpr int kPack = kPackOf<TX>;
  const bool packed = dim % kPack == 0 && is_aligned(gp, 16) && is_aligned(xp, 16) &&
                      is_aligned(dxp, 16) && is_aligned(rp_grad, 16) &&
                      is_aligned(wp, sizeof(TW) * kPack);
  const size_t partial_bytes = 2 * static_cast<size_t>(dim) * sizeof(float);
  const bool shared_partial = partial.defined() && partial_bytes <= kMaxSharedPartialBytes;
  const size_t shared_bytes = shared_partial ? partial_bytes : 0;
  const float* mp = data_or_null<const float>(mean);
  const float* rp = data_or_null<const float>(rstd);
  float* pp = data_or_null<float>(partial);
  if (packed) {
    norm_backward_kernel<TX, TW, kPack>
        <<<static_cast<int>(blocks), kBackwardThreads, shared_bytes, current_stream()>>>(
            gp, xp, wp, weight_offset, mp, rp, rows, dim, blocks, rp_grad, dxp, pp, shared_partial);
  } else {
    norm_backward_kernel<TX, TW, 1>
        <<<static_cast<int>(blocks), kBackwardThreads, shared_bytes, current_stream()>>>(
            gp, xp, wp, weight_offset, mp, rp, rows, dim, blocks, rp_grad, dxp, pp, shared_partial);
  }
  check_launch();
}

// Shared by both norms (mean and dbias undefined for rms_norm).
void norm_backward(const char* op, const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                   float weight_offset, const Tensor& mean, const Tensor& rstd,
                   const Tensor& grad_residual, const Tensor& dx, const Tensor& dweight,
                   const Tensor& dbias, const Tensor& partial) {
  const bool wants_partial = dweight.defined() || dbias.defined();
  if (!dx.defined() && !wants_partial) return;
  const auto [rows, dim] = row_shape(x);
  check_same_dtype(op, "grad_out", grad_out, x.dtype());
  check_same_dtype(op, "dx", dx, x.dtype());
  check_same_dtype(op, "grad_residual", grad_residual, x.dtype());
  if (grad_residual.defined() && !dx.defined()) {
    throw ValueError(str_cat(op, ": grad_residual is given without dx to add it into"));
  }
  check_same_dtype(op, "dweight", dweight, DType::f32);
  check_same_dtype(op, "dbias", dbias, DType::f32);
  if (wants_partial && (!partial.defined() || partial.size(0) != norm_backward_blocks(rows) ||
                        partial.numel() != partial.size(0) * 2 * dim)) {
    throw ValueError(
        str_cat(op, ": partial must be f32 [", norm_backward_blocks(rows), ", 2, ", dim, "]"));
  }
  const Tensor none;
  const Tensor& used_partial = wants_partial ? partial : none;
  DeviceGuard guard(x.device().index);
  const DType wdtype = weight.defined() ? weight.dtype() : x.dtype();
  HEADROOM_CUDA_DISPATCH_FLOAT(x.dtype(), TX, {
    switch (wdtype) {
      case DType::f32:
        launch_backward<TX, float>(grad_out, x, weight, weight_offset, mean, rstd, grad_residual,
                                   dx, used_partial);
        break;
      case DType::bf16:
        launch_backward<TX, __nv_bfloat16>(grad_out, x, weight, weight_offset, mean, rstd,
                                           grad_residual, dx, used_partial);
        break;
      case DType::f16:
        launch_backward<TX, __half>(grad_out, x, weight, weight_offset, mean, rstd, grad_residual,
                                    dx, used_partial);
        break;
      default:
        check_kernel_dtype(op, "weight", wdtype);
    }
  });
  if (wants_partial && dim > 0) {
    reduce_partials_kernel<<<blocks_for(dim), kThreads, 0, current_stream()>>>(
        static_cast<const float*>(partial.data_ptr()), partial.size(0), dim,
        data_or_null<float>(dweight), data_or_null<float>(dbias));
    check_launch();
  }
}

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                        const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  norm_forward("layer_norm", x, ResidualAdd{}, weight, 0.0f, bias, eps, out, mean, rstd);
}

void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& grad_residual,
                         const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         const Tensor& partial) {
  norm_backward("layer_norm backward", grad_out, x, weight, 0.0f, mean, rstd, grad_residual, dx,
                dweight, dbias, partial);
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
                      const Tensor& out, const Tensor& rstd) {
  norm_forward("rms_norm", x, ResidualAdd{}, weight, weight_offset, Tensor(), eps, out, Tensor(),
               rstd);
}

void rms_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                       float weight_offset, const Tensor& rstd, const Tensor& grad_residual,
                       const Tensor& dx, const Tensor& dweight, const Tensor& partial) {
  norm_backward("rms_norm backward", grad_out, x, weight, weight_offset, Tensor(), rstd,
                grad_residual, dx, dweight, Tensor(), partial);
}

// The residual add of sum = residual + branch: residual in sum's dtype, branch in it or, for an
// f32 sum, bf16 / f16; all contiguous and of one shape.
ResidualAdd residual_add(const char* op, const Tensor& residual, const Tensor& branch,
                         const Tensor& sum) {
  check_same_dtype(op, "residual", residual, sum.dtype());
  ResidualAdd add{residual.data_ptr(), branch.data_ptr(), BranchType::same};
  if (branch.dtype() != sum.dtype()) {
    if (sum.dtype() != DType::f32 ||
        (branch.dtype() != DType::bf16 && branch.dtype() != DType::f16))
      throw ValueError(str_cat(op, ": branch is ", dtype_name(branch.dtype()), " and sum ",
                               dtype_name(sum.dtype()),
                               "; a branch of another dtype than the sum "
                               "must be bf16 or f16 with an f32 sum"));
    add.branch_type = branch.dtype() == DType::bf16 ? BranchType::bf16 : BranchType::f16;
  }
  if (residual.numel() != sum.numel() || branch.numel() != sum.numel() ||
      !residual.is_contiguous() || !branch.is_contiguous() || !sum.is_contiguous()) {
    throw ValueError(str_cat(op, ": residual ", residual.shape(), ", branch ", branch.shape(),
                             " and sum ", sum.shape(), " must be contiguous and of one size"));
  }
  return add;
}

void add_layer_norm_forward(const Tensor& residual, const Tensor& branch, const Tensor& weight,
                            const Tensor& bias, float eps, const Tensor& sum, const Tensor& out,
                            const Tensor& mean, const Tensor& rstd) {
  const char* op = "add_layer_norm";
  norm_forward(op, sum, residual_add(op, residual, branch, sum), weight, 0.0f, bias, eps, out, mean,
               rstd);
}

void add_rms_norm_forward(const Tensor& residual, const Tensor& branch, const Tensor& weight,
                          float eps, float weight_offset, const Tensor& sum, const Tensor& out,
                          const Tensor& rstd) {
  const char* op = "add_rms_norm";
  norm_forward(op, sum, residual_add(op, residual, branch, sum), weight, weight_offset, Tensor(),
               eps, out, Tensor(), rstd);
}

}  // namespace

void fill_norm_kernels(NormKernels& kernels) {
  kernels.layer_norm_forward = layer_norm_forward;
  kernels.layer_norm_backward = layer_norm_backward;
  kernels.rms_norm_forward = rms_norm_forward;
  kernels.rms_norm_backward = rms_norm_backward;
  kernels.add_layer_norm_forward = add_layer_norm_forward;
  kernels.add_rms_norm_forward = add_rms_norm_forward;
}

}  // namespace headroom::cuda
