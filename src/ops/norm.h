// Normalisations, with backward. Statistics are computed in fp32 whatever the input dtype.
#pragma once

#include <optional>

#include "core/generator.h"
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

// Note [Residual norms]
// A pre-norm block reads its residual stream twice: the norm before each branch reads it, and
// the add after the branch does. As separate ops, forward writes the sum and the norm reads it
// back, and backward adds the two gradients the stream receives (the norm's dx and the add's)
// in a third kernel. add_layer_norm / add_rms_norm return both, sum = residual + branch and
// out = norm(sum), from one kernel, and one node whose backward writes dsum = dout's dx + dsum
// in the norm's backward kernel, in the incoming gradient's buffer when it is the only holder:
// two launches and a residual-sized buffer fewer per norm. With an undefined branch, sum is
// residual itself (an alias that routes its gradient through the node), for the norm that
// opens a block. Results equal add's and the norm's bit for bit in forward; in backward the two
// gradients are added before the norm's dx is rounded, one rounding fewer (in f32, the same).
// Where the kernel cannot take the dtypes (autocast recasting the norm's input, a residual
// narrower than the sum), the two ops run instead.
struct ResidualNorm {
  Tensor sum;  // residual + branch: the residual stream after the add
  Tensor out;  // the norm of sum, in out_dtype
};

// Dropout of the branch before the add (GPT-2's resid_pdrop; dropout_add's draws and values):
// with it the add is dropout_add's kernel and the node the norm's alone.
struct BranchDropout {
  double p = 0.0;
  bool training = false;
  Generator* generator = nullptr;
  bool active() const { return training && p > 0.0; }
};

ResidualNorm add_layer_norm(const Tensor& residual, const Tensor& branch, const Tensor& weight,
                            const Tensor& bias, double eps = 1e-5,
                            std::optional<DType> out_dtype = std::nullopt,
                            BranchDropout dropout = {});
ResidualNorm add_rms_norm(const Tensor& residual, const Tensor& branch, const Tensor& weight,
                          double eps = 1e-6, std::optional<DType> out_dtype = std::nullopt,
                          double weight_offset = 0.0, BranchDropout dropout = {});

}  // namespace headroom
