// The GEMM family's kernel table (Note [Kernel tables] in backend/kernel_table.h): matrix products
// for linear, the chunked logits of linear_cross_entropy and attention-free matmuls.
#pragma once

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

// What a GEMM adds to alpha * op(a) @ op(b) + beta * c before it stores c.
enum class GemmEpilogue { none, bias, bias_gelu };

struct GemmKernels {
  static constexpr const char* kName = "gemm";

  // c = alpha * op(a) @ op(b) + beta * c, then the epilogue (bias: + bias[col], bias_gelu: gelu of
  // that). a, b, c are 2-D, or 3-D with a leading batch dimension (a or b may have batch stride 0);
  // each has a unit stride in its last dimension and any leading stride. a and b share a dtype
  // (f32, bf16 or f16; f32 runs without TF32); c is f32 or their dtype; bias is in c's dtype. A
  // workspace, when needed, comes from the device's caching allocator.
  Kernel<void(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, float alpha, float beta,
              const Tensor& c, GemmEpilogue epilogue, const Tensor& bias)>
      gemm{"gemm"};
};

}  // namespace headroom
