// The normalisations' kernel table (Note [Kernel tables] in backend/kernel_table.h): layer norm and
// RMS norm over the last dimension, statistics f32, one per row.
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct NormKernels {
  static constexpr const char* kName = "norm";

  // Row blocks of the backward's partial weight / bias sums: partial is [backward_blocks(rows), 2,
  // dim] f32. A function of rows only, so that results repeat on every GPU and the meta device can
  // plan the partials.
  Kernel<int64_t(int64_t rows)> backward_blocks{"backward_blocks"};
  Kernel<void(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
              const Tensor& out, const Tensor& mean, const Tensor& rstd)>
      layer_norm_forward{"layer_norm_forward"};
  // dweight / dbias are f32; dx in its own dtype.
  Kernel<void(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
              const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
              const Tensor& partial)>
      layer_norm_backward{"layer_norm_backward"};
  Kernel<void(const Tensor& x, const Tensor& weight, float eps, const Tensor& out,
              const Tensor& rstd)>
      rms_norm_forward{"rms_norm_forward"};
  Kernel<void(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& rstd,
              const Tensor& dx, const Tensor& dweight, const Tensor& partial)>
      rms_norm_backward{"rms_norm_backward"};
};

}  // namespace headroom
