// Harness cases for scaled_dot_product_attention and rotary_embedding. Sequence lengths pass the
// attention kernels' tiles (64 queries x 256 keys forward, 64 keys x 256 queries backward), so
// tile edges, the causal diagonal and several tiles per row are exercised.
#include "nn/sequence_boundaries.h"
#include "ops/op_harness.h"
#include "ops/ops.h"

namespace headroom::testing {

namespace {

// q, k, v inputs [B, H, T, D] for a case.
std::vector<OpInput> qkv(int64_t b, int64_t hq, int64_t hkv, int64_t tq, int64_t tk, int64_t d) {
  return {normal({b, hq, tq, d}), normal({b, hkv, tk, d}), normal({b, hkv, tk, d})};
}

// The GPU's kernels round P to the dtype before P V and dP (as FlashAttention): two unit
// roundoffs of the largest magnitude, one ulp there (Note [CUDA op tolerances]).
void register_attention_case(OpCase c) {
  c.rounded_intermediate_units = 2.0;
  register_op_case(std::move(c));
}

void attention_case(const std::string& name, std::vector<OpInput> inputs, bool causal,
                    std::optional<int64_t> window = {}, std::optional<double> softcap = {}) {
  OpCase c{"attention/" + name, std::move(inputs),
           [causal, window, softcap](const std::vector<Tensor>& in) {
             return scaled_dot_product_attention(in[0], in[1], in[2], causal, {}, 0.0, nullptr,
                                                 window, softcap);
           }};
  // A window of one key: each query attends to itself alone, so dS = P (dP - D) and with it dQ
  // and dK are 0 in exact arithmetic and rounding noise in each device's summation order (the
  // CPU's may be exactly 0): a few ulps of |dP| (about 3 at D 8) times the scale and |k|, about
  // 1e-6 at most; 1e-5 is still five orders below what a wrong mask or index gives.
  if (window == 1) c.gpu_gradient_atol = 1e-5;
  register_attention_case(std::move(c));
}

// Packed sequences (Note [Packed sequences in attention]): `cu` over the flattened [B * T]
// positions, made on the inputs' device inside the case.
void packed_attention_case(const std::string& name, std::vector<OpInput> inputs,
                           std::vector<int32_t> cu, std::optional<int64_t> window = {}) {
  register_attention_case(
      {"attention/packed_" + name, std::move(inputs), [cu, window](const std::vector<Tensor>& in) {
         const SequenceBoundaries s =
             make_sequence_boundaries(cu, in[0].size(0), in[0].size(2), in[0].device());
         return scaled_dot_product_attention(in[0], in[1], in[2], true, {}, 0.0, nullptr, window,
                                             std::nullopt, s.attention);
       }});
}

}  // namespace

HEADROOM_OP_CASES(attention_cases) {
  // Sequences shorter than a tile, crossing the 64-row and 256-key tiles, and one a whole row.
  packed_attention_case("gqa/2x4kv2x150x8", qkv(2, 4, 2, 150, 150, 8),
                        {0, 5, 70, 71, 150, 213, 300});
  packed_attention_case("300x8", qkv(1, 2, 2, 300, 300, 8), {0, 1, 40, 290, 300});
  packed_attention_case("window20/2x2kv1x90x8", qkv(2, 2, 1, 90, 90, 8), {0, 30, 90, 100, 180}, 20);
  attention_case("causal/2x4x5x8", qkv(2, 4, 4, 5, 5, 8), true);
  attention_case("causal_gqa/2x4kv2x70x16", qkv(2, 4, 2, 70, 70, 16), true);
  attention_case("full/2x4x70x8", qkv(2, 4, 4, 70, 70, 8), false);
  attention_case("full_gqa/2x4kv2_q37_k70x8", qkv(2, 4, 2, 37, 70, 8), false);
  // One kv head for three query heads: with two or more threads the backward takes the
  // two-pass schedule (see Note [Attention backward schedules]).
  attention_case("causal_gqa/1x3kv1x130x8", qkv(1, 3, 1, 130, 130, 8), true);
  attention_case("causal/1x2x300x8", qkv(1, 2, 2, 300, 300, 8), true);
  attention_case("full_gqa/1x2kv1_q9_k300x8", qkv(1, 2, 1, 9, 300, 8), false);
  // Sliding windows: shorter than a tile; spanning tiles, so that whole key tiles (forward) and
  // query tiles (backward) are skipped; one key (self only).
  attention_case("window3/2x4kv2x20x8", qkv(2, 4, 2, 20, 20, 8), true, 3);
  attention_case("window70_gqa/1x3kv1x300x8", qkv(1, 3, 1, 300, 300, 8), true, 70);
  attention_case("window1/1x2x9x8", qkv(1, 2, 2, 9, 9, 8), true, 1);
  // Gemma 2's score soft-capping, at caps that bend most scores (the scaled scores here are of
  // order 1): causal with GQA over several key tiles, full, and with a window.
  attention_case("softcap_causal_gqa/1x4kv2x300x16", qkv(1, 4, 2, 300, 300, 16), true, {}, 1.5);
  attention_case("softcap_full/2x2x37x8", qkv(2, 2, 2, 37, 37, 8), false, {}, 0.8);
  attention_case("softcap_window5/2x4kv2x70x8", qkv(2, 4, 2, 70, 70, 8), true, 5, 2.0);
  // The layout models pass: [B, T, H, D] projections viewed as [B, H, T, D].
  register_attention_case({"attention/transposed_views_scale/2x19x4kv2x16",
                           {normal({2, 19, 4, 16}), normal({2, 19, 2, 16}), normal({2, 19, 2, 16})},
                           [](const std::vector<Tensor>& in) {
                             return scaled_dot_product_attention(transpose(in[0], 1, 2),
                                                                 transpose(in[1], 1, 2),
                                                                 transpose(in[2], 1, 2), true, 0.3);
                           }});
  // The generator is made inside, so the mask is the same on every call: a pure function. Low
  // precision still compares exactly: bf16 / f16 inputs draw the same mask as their fp32 copies.
  register_attention_case({"attention/dropout_causal_gqa/2x4kv2x70x8", qkv(2, 4, 2, 70, 70, 8),
                           [](const std::vector<Tensor>& in) {
                             Generator gen(2024);
                             return scaled_dot_product_attention(in[0], in[1], in[2], true, {},
                                                                 0.25, &gen);
                           }});
  // Positions restarting at 0 in each packed sequence (HF's position_ids), on the inputs' device.
  register_op_case(
      {"rotary/positions/2x3x9x8", {normal({2, 3, 9, 8})}, [](const std::vector<Tensor>& in) {
         const SequenceBoundaries s =
             make_sequence_boundaries({0, 4, 9, 11, 18}, 2, 9, in[0].device());
         return rotary_embedding(in[0], RopeParameters{}, 0, s.position_ids);
       }});
  register_op_case({"rotary/2x4x7x8", {normal({2, 4, 7, 8})}, [](const std::vector<Tensor>& in) {
                      return rotary_embedding(in[0]);
                    }});
  register_op_case(
      {"rotary/offset_theta/1x3x70x16",
       {normal({1, 3, 70, 16})},
       [](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 500000.0, 5); }});
  // Llama 3.1's scaling with a short original context, so all three bands occur at D = 16.
  register_op_case({"rotary/llama3_scaled/1x2x40x16",
                    {normal({1, 2, 40, 16})},
                    [](const std::vector<Tensor>& in) {
                      const RopeParameters rope{
                          .theta = 500000.0,
                          .scaling = {.type = RopeScaling::Type::llama3,
                                      .factor = 8.0,
                                      .low_freq_factor = 1.0,
                                      .high_freq_factor = 4.0,
                                      .original_max_position_embeddings = 64}};
                      return rotary_embedding(in[0], rope, 3);
                    }});
  register_op_case(
      {"rotary/linear_scaled/1x2x9x8", {normal({1, 2, 9, 8})}, [](const std::vector<Tensor>& in) {
         RopeParameters rope;
         rope.scaling.type = RopeScaling::Type::linear;
         rope.scaling.factor = 4.0;
         return rotary_embedding(in[0], rope);
       }});
  // yarn (a ramp over D = 16 with an original context of 64) and longrope past its original
  // context of 32 (the long factors; 5 + 40 positions), both with an attention factor.
  register_op_case(
      {"rotary/yarn/1x2x40x16", {normal({1, 2, 40, 16})}, [](const std::vector<Tensor>& in) {
         RopeParameters rope;
         rope.scaling.type = RopeScaling::Type::yarn;
         rope.scaling.factor = 4.0;
         rope.scaling.original_max_position_embeddings = 64;
         rope.scaling.attention_factor = 1.1386;
         return rotary_embedding(in[0], rope, 3);
       }});
  register_op_case(
      {"rotary/longrope/1x2x40x8", {normal({1, 2, 40, 8})}, [](const std::vector<Tensor>& in) {
         RopeParameters rope;
         rope.scaling.type = RopeScaling::Type::longrope;
         rope.scaling.original_max_position_embeddings = 32;
         rope.scaling.attention_factor = 1.2;
         rope.scaling.factor_count = 4;
         const float short_factor[] = {1.0f, 1.25f, 1.5f, 2.0f};
         const float long_factor[] = {1.0f, 3.0f, 6.0f, 12.0f};
         for (int i = 0; i < 4; ++i) {
           rope.scaling.short_factor[i] = short_factor[i];
           rope.scaling.long_factor[i] = long_factor[i];
         }
         return rotary_embedding(in[0], rope, 5);
       }});
  register_op_case(
      {"rotary/transposed_view/2x5x3x6", {normal({2, 5, 3, 6})}, [](const std::vector<Tensor>& in) {
         return rotary_embedding(transpose(in[0], 1, 2), 10000.0, 2);
       }});
  register_op_case({"rotary/strided_last_dim/2x6x3x5",
                    {normal({2, 6, 3, 5})},
                    [](const std::vector<Tensor>& in) {
                      return rotary_embedding(permute(in[0], {0, 2, 3, 1}));
                    }});
}

}  // namespace headroom::testing
