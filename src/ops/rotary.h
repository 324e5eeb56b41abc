// Rotary position embedding as Llama / HF apply it (rotate_half pairing i with i + D/2).
#pragma once

#include "backend/rope_parameters.h"
#include "core/tensor.h"

namespace headroom {

// x [B, H, T, D] (any strides), D even. Position of token t is position_offset + t;
// inv_freq[i] = theta^(-2i/D) scaled as rope.scaling says (scaled_inv_freq), angle = position *
// inv_freq[i] (in fp32, as HF); out = x * cos + rotate_half(x) * sin with rotate_half(x) =
// cat(-x[D/2:], x[:D/2]). Returns a contiguous [B, H, T, D]. `positions` (i64 [B, T] on x's
// device, each >= 0; HF's position_ids, restarting at 0 for each packed sequence) gives token
// (b, t) the position position_offset + positions[b, t] instead.
Tensor rotary_embedding(const Tensor& x, const RopeParameters& rope, int64_t position_offset = 0,
                        const Tensor& positions = {});
// Unscaled RoPE of base `theta`.
Tensor rotary_embedding(const Tensor& x, double theta = 10000.0, int64_t position_offset = 0);

}  // namespace headroom
