// Rotary position embedding kernels (HF Llama's rotate_half convention: element i pairs with
// i + D/2), fp32.
#pragma once

#include <cstdint>

namespace headroom::cpu {

// cos_sin [2, T, D/2]: cos then sin of (position_offset + t) * inv_freq[i], with
// inv_freq[i] = 1 / theta^((2i) / D), every step in fp32 as HF's LlamaRotaryEmbedding.
void rotary_table(int64_t seq_len, int64_t head_dim, double theta, int64_t position_offset,
                  float* cos_sin);

// out [B, H, T, D] contiguous = x rotated by the table (x with element strides `strides`);
// `inverse` rotates back (the transpose, which is the gradient of the forward rotation).
void rotary_apply(const float* x, const int64_t strides[4], const int64_t sizes[4],
                  const float* cos_sin, bool inverse, float* out);

}  // namespace headroom::cpu
