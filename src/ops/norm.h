// Normalisations, with backward. Statistics are computed in fp32 whatever the input dtype.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace headroom {

// Over the last dimension: (x - mean) / sqrt(var + eps) * weight + bias (torch.nn.LayerNorm;
// biased variance). weight and bias [dim] may be undefined.
//
// out_dtype: the result rounded straight into that dtype, which is cast(layer_norm(...),
// out_dtype) bit for bit (one rounding of the same fp32 value) without the tensor between: the
// dtype the projections after a norm convert their input to under autocast
// (AdaptableLinear::input_dtype). Backward takes the gradient in that dtype or in the norm's
// own, as the cast's backward did.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5,
                  std::optional<DType> out_dtype = std::nullopt);
// Llama's RMSNorm: x * rsqrt(mean(x^2) + eps) * weight, over the last dimension; out_dtype as
// layer_norm's. weight_offset 1 is Gemma's RMSNorm, x * rsqrt(mean(x^2) + eps) * (1 + weight)
// (transformers' norm(x.float()) * (1.0 + weight.float()), rounded once at the end), whose
// weight is stored centred on 0; the gradient of weight is the same either way.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6,
                std::optional<DType> out_dtype = std::nullopt, double weight_offset = 0.0);

}  // namespace headroom
