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

}  // namespace headroom
