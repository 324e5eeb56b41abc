// Matrix products: matmul (batched, broadcasting batch dimensions as torch.matmul) and linear
// (x @ W^T + b, or x @ W + b for GPT-2's Conv1D weights), with backward.
#pragma once

#include "core/tensor.h"

namespace headroom {

// How a linear layer's weight is laid out: torch.nn.Linear's [out, in], or HF GPT-2 Conv1D's
// [in, out] (y = x @ W + b).
enum class WeightLayout { out_in, in_out };

// a [..., M, K] @ b [..., K, N] -> [..., M, N]; batch dimensions broadcast. Both at least 2-D.
Tensor matmul(const Tensor& a, const Tensor& b);

// x [..., in] -> [..., out]; bias [out] may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              WeightLayout layout = WeightLayout::out_in);

// base + alpha * linear(x, weight), weight [out, in], as one GEMM that adds into base's values
// (beta 1): an adapter's branch joining its base layer's output (LoRA's B(A(x)) * scaling)
// without the scaled copy and the add. When the caller hands base over (std::move) and nothing
// else holds its buffer, the result is that buffer, written in place, and no memory is
// allocated; otherwise base is copied first. Backward hands g to base and puts alpha into the
// GEMMs of dx and dW. The GEMM rounds alpha * (x W^T) + base once, where add(base,
// scale(linear(x, weight), alpha)) rounds three times; a base of another dtype than the
// product's or f32 takes those ops.
Tensor linear_add(Tensor base, const Tensor& x, const Tensor& weight, double alpha = 1.0);

}  // namespace headroom
