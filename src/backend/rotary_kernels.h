// The rotary embedding's kernel table (Note [Kernel tables] in backend/kernel_table.h).
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"
#include "backend/rope_parameters.h"
#include "core/tensor.h"

namespace headroom {

struct RotaryKernels {
  static constexpr const char* kName = "rotary";

  // Rotary embedding of x [B, H, T, D] (any strides) into out (contiguous), with the CPU's cos /
  // sin table values (cpu::rotary_table: `rope`'s scaled frequencies) computed in the kernel;
  // `inverse` rotates back. Token (b, t) is at position_offset + t, or with `positions` (i64
  // [B, T] contiguous on x's device, each >= 0; packed sequences restart at 0) at
  // position_offset + positions[b, t].
  Kernel<void(const Tensor& x, const RopeParameters& rope, int64_t position_offset, bool inverse,
              const Tensor& out, const Tensor& positions)>
      apply{"apply"};
};

}  // namespace headroom
