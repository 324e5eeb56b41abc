// Normalisations, with backward. Statistics are computed in fp32 whatever the input dtype.
#pragma once

#include "core/tensor.h"

namespace headroom {

// Over the last dimension: (x - mean) / sqrt(var + eps) * weight + bias (torch.nn.LayerNorm;
// biased variance). weight and bias [dim] may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Llama's RMSNorm: x * rsqrt(mean(x^2) + eps) * weight, over the last dimension.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

}  // namespace headroom
