// The FP8 family's kernel table (Note [Kernel tables] in backend/kernel_table.h): quantizing to
// E4M3 / E5M2 with Transformer Engine's scales (per tensor, or per block: MXFP8's 1 x 32 E8M0,
// Float8BlockScaling's 1 x 128 and 128 x 128), dequantizing, and delayed scaling's history update.
// The formulas are core/fp8_scaling.h's, shared by every backend. The FP8 GEMM is on the gemm
// table (backend/gemm_kernels.h).
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"
#include "core/fp8_scaling.h"
#include "core/tensor.h"

namespace headroom {

// The scale blocks of a blockwise quantization of a [rows, cols] tensor: block_rows x block_cols
// values share one scale; edge blocks are partial.
// block_rows 0 means one scale for the whole tensor.
struct Fp8BlockShape {
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  bool e8m0 = false;  // scales are E8M0 exponents (u8), else fp32 scale_inv
};

struct Fp8Kernels {
  static constexpr const char* kName = "fp8";

  // q = saturate(x * scale) for every element of x (contiguous, f32 / bf16 / f16), q contiguous
  // f8_e4m3fn or f8_e5m2 of x's shape; scale, scale_inv and amax are f32 [1]. With
  // scale_from_amax (current scaling) the entry first sets amax = max|x| and scale =
  // scale_from_amax(amax, fp8_max); otherwise (delayed scaling) it reads scale and records
  // amax = max(amax, max|x|) (NaN in x makes it NaN). Either way scale_inv = 1 / scale. counts,
  // when defined, is i64 [2]: += the values that overflowed and underflowed (as
  // fp8_quantize_value counts them).
  Kernel<void(const Tensor& x, const Tensor& scale, bool scale_from_amax, const Tensor& q,
              const Tensor& scale_inv, const Tensor& amax, const Tensor& counts)>
      quantize_tensorwise{"quantize_tensorwise"};
  // Blockwise: x viewed as [rows, cols] (its last dimension the columns), each block quantized
  // with its own scale: E8M0 exponents (u8 [ceil(rows / br), ceil(cols / bc)]) with
  // q = saturate(x * mxfp8_quantize_factor(e)), or fp32 scale_inv of the same shape with
  // q = saturate(x * s), s = scale_from_amax(amax of the block, fp8_max, pow2 = true). counts as
  // above.
  Kernel<void(const Tensor& x, Fp8BlockShape block, const Tensor& q, const Tensor& scales,
              const Tensor& counts)>
      quantize_blockwise{"quantize_blockwise"};
  // out (f32 / bf16 / f16, q's shape) = q * its scale: scale_inv f32 [1] per tensor (block
  // undefined: block_rows 0), or the blockwise scales as above; rounded once to out's dtype.
  Kernel<void(const Tensor& q, const Tensor& scales, Fp8BlockShape block, const Tensor& out)>
      dequantize{"dequantize"};
  // Delayed scaling's update of `slots` slots at once (delayed_scaling_update in
  // core/fp8_scaling.h): history f32 [slots, length], row s slot s's history with its recorded
  // amax first; scaled_max, scale and scale_inv f32 [slots] (scaled_max: fp8_max * 2^-margin of
  // the slot's dtype).
  Kernel<void(const Tensor& history, const Tensor& scaled_max, AmaxComputeAlgo algo,
              const Tensor& scale, const Tensor& scale_inv)>
      delayed_scaling_update{"delayed_scaling_update"};
};

inline bool fp8_per_tensor(const Fp8BlockShape& block) { return block.block_rows == 0; }

// The shape of the scales of a [rows, cols] tensor quantized in `block`: [1] per tensor, else
// [ceil(rows / block_rows), ceil(cols / block_cols)].
inline Shape fp8_scales_shape(int64_t rows, int64_t cols, const Fp8BlockShape& block) {
  if (fp8_per_tensor(block)) return Shape{1};
  return Shape{(rows + block.block_rows - 1) / block.block_rows,
               (cols + block.block_cols - 1) / block.block_cols};
}

}  // namespace headroom
