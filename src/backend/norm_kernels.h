// The normalisations' kernel table (Note [Kernel tables] in backend/kernel_table.h): layer norm and
// RMS norm over the last dimension, statistics f32, one per row.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// Row blocks of the backward's partial weight / bias sums: partial is
// [norm_backward_blocks(rows), 2, dim] f32 on every device, a function of the rows alone, so
// that results repeat on every GPU and a dry run plans the same bytes for every device. 16 rows
// a block keeps a GPU's blocks busy; the CPU runs the blocks as its parallel units.
inline constexpr int64_t kNormRowsPerBackwardBlock = 16;
inline constexpr int64_t kNormMaxBackwardBlocks = 512;
inline int64_t norm_backward_blocks(int64_t rows) {
  return std::clamp<int64_t>((rows + kNormRowsPerBackwardBlock - 1) / kNormRowsPerBackwardBlock, 1,
                             kNormMaxBackwardBlocks);
}

struct NormKernels {
  static constexpr const char* kName = "norm";

  // out in x's dtype, or in bf16 / f16 for f32 x (ops/norm.h: out_dtype).

  Kernel<void(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
              const Tensor& out, const Tensor& mean, const Tensor& rstd)>
      layer_norm_forward{"layer_norm_forward"};
  // dweight / dbias are f32; dx in x's dtype. grad_residual (undefined: none) is the gradient
  // that reached x by the residual stream, in x's dtype: dx = grad_residual + the norm's dx,
  // added in fp32 and rounded once; dx may be grad_residual itself (the sum in place), so that
  // the residual's two gradients cost no second pass and no buffer (Note [Residual norms] in
  // ops/norm.h).
  Kernel<void(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
              const Tensor& rstd, const Tensor& grad_residual, const Tensor& dx,
              const Tensor& dweight, const Tensor& dbias, const Tensor& partial)>
      layer_norm_backward{"layer_norm_backward"};
  // weight_offset is added to each weight as it is read in fp32: 0 (Llama's w), or 1 (Gemma's
  // (1 + w), whose weight is stored centred on 0). dweight is the same sum either way.
  Kernel<void(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
              const Tensor& out, const Tensor& rstd)>
      rms_norm_forward{"rms_norm_forward"};
  Kernel<void(const Tensor& grad_out, const Tensor& x, const Tensor& weight, float weight_offset,
              const Tensor& rstd, const Tensor& grad_residual, const Tensor& dx,
              const Tensor& dweight, const Tensor& partial)>
      rms_norm_backward{"rms_norm_backward"};
  // The residual add and the norm after it in one pass: sum = residual + branch, rounded to
  // sum's dtype (add's result: residual's, which is branch's or f32 with a bf16 / f16 branch),
  // then the norm of sum as layer_norm_forward / rms_norm_forward compute it from the rounded
  // values, so that both results equal add's and the norm's bit for bit.
  Kernel<void(const Tensor& residual, const Tensor& branch, const Tensor& weight,
              const Tensor& bias, float eps, const Tensor& sum, const Tensor& out,
              const Tensor& mean, const Tensor& rstd)>
      add_layer_norm_forward{"add_layer_norm_forward"};
  Kernel<void(const Tensor& residual, const Tensor& branch, const Tensor& weight, float eps,
              float weight_offset, const Tensor& sum, const Tensor& out, const Tensor& rstd)>
      add_rms_norm_forward{"add_rms_norm_forward"};
};

}  // namespace headroom
