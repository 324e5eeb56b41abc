// The rotary embedding on CUDA (backend/cpu/rotary.cpp): the CPU's cos / sin table computed per
// position in shared memory, then single IEEE operations, so that given the same table the
// rotation agrees with the CPU bit for bit.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/backend_parts.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/operand.cuh"
#include "core/error.h"

namespace headroom::cuda {
namespace {

// ---- rotary embedding: backend/cpu/rotary.cpp

struct RotaryShape {
  int64_t heads = 0, seq_len = 0, dim = 0;
  int64_t stride[4] = {};  // x's strides, in elements
};

// Pairs (i, i + D/2) a block rotates at least, so that each block's table row is worth its cost.
constexpr int64_t kRotaryPairsPerBlock = 2048;
constexpr int kMaxGridY = 65535;

// Block (t, y) computes row t of the CPU's table (cpu::rotary_table) into shared memory, then
// rotates rows y, y + gridDim.y, ... of the B * H rows at position t. With `positions` (i64
// [B, T]) block (b T + t, y) does so for the H rows of batch row b at position positions[b, t]. The
// table entry is computed as the CPU does in fp32, except that pow, cos and sin are taken in double
// and rounded once: the correctly rounded values, which glibc's powf / cosf / sinf also return in
// all but rare cases (they are accurate to about 0.8 ulp, not always correctly rounded).
__global__ void rotary_kernel(Operand x, Operand out, RotaryShape s, int64_t rows, float base,
                              RopeParameters rope, int64_t position_offset, float sign,
                              const int64_t* positions) {
  extern __shared__ float table[];  // cos[half], then sin[half]
  const int64_t half = s.dim / 2;
  const int64_t t = positions ? blockIdx.x % s.seq_len : blockIdx.x;
  // The first of this block's B * H rows (b H with positions: rows counts one batch row's heads).
  const int64_t row0 = positions ? (blockIdx.x / s.seq_len) * s.heads : 0;
  const float position =
      static_cast<float>(position_offset + (positions ? positions[blockIdx.x] : t));
  // Without positions the forward's end; longrope with positions is refused on the host.
  const bool long_factors = rope_uses_long_factors(rope.scaling, position_offset + s.seq_len);
  const float attention_factor = rope_attention_factor(rope.scaling);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(s.dim);
    const float inv_freq = rope_inv_freq(
        rope, static_cast<float>(pow(static_cast<double>(base), static_cast<double>(exponent))), i,
        s.dim, long_factors);
    const double angle = static_cast<double>(__fmul_rn(position, inv_freq));
    table[i] = __fmul_rn(static_cast<float>(cos(angle)), attention_factor);
    table[half + i] = __fmul_rn(static_cast<float>(sin(angle)), attention_factor);
  }
  __syncthreads();
  // gridDim.y <= rows, so every block has at least one row.
  const int64_t my_rows = (rows - blockIdx.y + gridDim.y - 1) / gridDim.y;
  for (int64_t j = threadIdx.x; j < my_rows * half; j += blockDim.x) {
    const int64_t row = row0 + blockIdx.y + (j / half) * gridDim.y, i = j % half;
    const int64_t b = row / s.heads, h = row % s.heads;
    const int64_t in = b * s.stride[0] + h * s.stride[1] + t * s.stride[2];
    const int64_t o = (row * s.seq_len + t) * s.dim;
    const float c = table[i], sn = sign * table[half + i];
    const float x1 = load(x, in + i * s.stride[3]), x2 = load(x, in + (i + half) * s.stride[3]);
    // Explicit roundings: no contraction into an FMA, which the CPU kernel does not do either.
    store(out, o + i, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn)));
    store(out, o + half + i, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn)));
  }
}

void rotary(const Tensor& x, const RopeParameters& rope, int64_t position_offset, bool inverse,
            const Tensor& out, const Tensor& positions) {
  check_kernel_dtype("rotary", "x", x.dtype());
  check_kernel_dtype("rotary", "out", out.dtype());
  RotaryShape s;
  s.heads = x.size(1);
  s.seq_len = x.size(2);
  s.dim = x.size(3);
  for (int d = 0; d < 4; ++d) s.stride[d] = x.stride(d);
  if (positions.defined() && (positions.dtype() != DType::i64 || !positions.is_contiguous() ||
                              positions.shape() != Shape{x.size(0), s.seq_len})) {
    throw ValueError(str_cat("cuda rotary: positions must be contiguous i64 [", x.size(0), ", ",
                             s.seq_len, "], not ", dtype_name(positions.dtype()), " ",
                             positions.shape()));
  }
  // longrope picks its factors by the largest position (the CPU's table rows), which only the
  // device holds here: reading it back would be a host sync per call.
  if (positions.defined() && rope.scaling.type == RopeScaling::Type::longrope) {
    throw NotImplementedError(
        "cuda rotary: longrope over packed positions (the factors depend on the largest position)");
  }
  // With positions each block takes the heads of one batch row.
  const int64_t rows = positions.defined() ? s.heads : x.size(0) * s.heads, half = s.dim / 2;
  if (rows == 0 || x.size(0) == 0 || s.seq_len == 0 || half == 0) return;
  const size_t table_bytes = static_cast<size_t>(s.dim) * sizeof(float);
  if (table_bytes > 48 * 1024) {
    throw NotImplementedError(
        str_cat("cuda rotary: head size ", s.dim, " exceeds the kernel's limit of 12288"));
  }
  const int64_t blocks = positions.defined() ? x.size(0) * s.seq_len : s.seq_len;
  if (blocks > INT32_MAX) {
    throw NotImplementedError(str_cat("cuda rotary: ", s.seq_len, " positions exceed the grid"));
  }
  const int64_t rows_per_block = (kRotaryPairsPerBlock + half - 1) / half;
  const dim3 grid(static_cast<unsigned>(blocks),
                  static_cast<unsigned>(
                      std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, kMaxGridY)));
  DeviceGuard guard(x.device().index);
  rotary_kernel<<<grid, kThreads, table_bytes, current_stream()>>>(
      operand_of(x), operand_of(out), s, rows, static_cast<float>(rope.theta), rope,
      position_offset, inverse ? -1.0f : 1.0f,
      positions.defined() ? static_cast<const int64_t*>(positions.data_ptr()) : nullptr);
  check_launch();
}

}  // namespace

void fill_rotary_kernels(RotaryKernels& kernels) { kernels.apply = rotary; }

}  // namespace headroom::cuda
