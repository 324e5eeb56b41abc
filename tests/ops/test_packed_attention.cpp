// Attention over packed sequences (Note [Packed sequences in attention]) on the CPU: each
// sequence's outputs and gradients are those of the sequence run alone, bit for bit in fp32 and
// in bf16 (the kernels tile each sequence from its first token, so every sum runs in the same
// order); bad boundaries are refused by name; the census counts only the sequences' pairs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/kernel_census.h"
#include "nn/sequence_boundaries.h"
#include "ops/ops.h"

namespace headroom {
namespace {

struct PackedCase {
  const char* name;
  int64_t batch, q_heads, kv_heads, len, dim;
  std::vector<int32_t> cu;
  std::optional<int64_t> window;
  DType dtype;
};

// Rows [begin, end) of batch row b of x [B, H, T, D] as a new leaf [1, H, end - begin, D].
Tensor alone(const Tensor& x, int64_t b, int64_t begin, int64_t end) {
  return x.detach()
      .narrow(0, b, 1)
      .narrow(2, begin, end - begin)
      .contiguous()
      .set_requires_grad(true);
}

void expect_same(const Tensor& packed, int64_t b, int64_t begin, int64_t end, const Tensor& single,
                 const std::string& what) {
  const std::vector<float> want = single.to_float_vector();
  const std::vector<float> got =
      packed.narrow(0, b, 1).narrow(2, begin, end - begin).contiguous().to_float_vector();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << " element " << i;
  }
}

TEST(PackedAttention, EachSequenceEqualsItRunAloneBitForBit) {
  const std::vector<PackedCase> cases = {
      // Sequences shorter than a tile, crossing the forward's 64-query and the backward's
      // 64-key tiles, of one token, and filling a row.
      {"gqa", 2, 4, 2, 150, 16, {0, 5, 70, 71, 150, 213, 300}, {}, DType::f32},
      {"long", 1, 2, 2, 600, 8, {0, 290, 600}, {}, DType::f32},
      {"window", 2, 2, 1, 150, 8, {0, 100, 150, 170, 300}, 30, DType::f32},
      {"bf16", 2, 4, 2, 150, 16, {0, 5, 70, 71, 150, 213, 300}, {}, DType::bf16},
  };
  for (const PackedCase& c : cases) {
    SCOPED_TRACE(c.name);
    Generator gen(7);
    auto draw = [&](int64_t heads) {
      return Tensor::randn({c.batch, heads, c.len, c.dim}, DType::f32, kCPU, &gen).to(c.dtype);
    };
    const Tensor q = draw(c.q_heads).set_requires_grad(true);
    const Tensor k = draw(c.kv_heads).set_requires_grad(true);
    const Tensor v = draw(c.kv_heads).set_requires_grad(true);
    const Tensor grad_out = draw(c.q_heads);
    const SequenceBoundaries s = make_sequence_boundaries(c.cu, c.batch, c.len, kCPU);
    const Tensor out =
        scaled_dot_product_attention(q, k, v, true, {}, 0.0, nullptr, c.window, {}, s.attention);
    backward(out, grad_out);
    for (size_t n = 0; n + 1 < c.cu.size(); ++n) {
      const int64_t b = c.cu[n] / c.len, begin = c.cu[n] % c.len;
      const int64_t end = c.cu[n + 1] - b * c.len;
      const Tensor q1 = alone(q, b, begin, end), k1 = alone(k, b, begin, end),
                   v1 = alone(v, b, begin, end);
      const Tensor out1 =
          scaled_dot_product_attention(q1, k1, v1, true, {}, 0.0, nullptr, c.window);
      backward(out1, grad_out.narrow(0, b, 1).narrow(2, begin, end - begin).contiguous());
      const std::string seq = "sequence " + std::to_string(n);
      expect_same(out, b, begin, end, out1, seq + " out");
      expect_same(q.grad(), b, begin, end, q1.grad(), seq + " grad_q");
      expect_same(k.grad(), b, begin, end, k1.grad(), seq + " grad_k");
      expect_same(v.grad(), b, begin, end, v1.grad(), seq + " grad_v");
    }
  }
}

TEST(PackedAttention, BadBoundariesAreRefusedByName) {
  auto message = [](const std::vector<int32_t>& cu) {
    try {
      (void)make_sequence_boundaries(cu, 2, 8, kCPU);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({0, 5, 12}).find("from 0 to B * T = 16"), std::string::npos);
  EXPECT_NE(message({0, 5, 5, 16}).find("cu_seqlens[2] = 5 must exceed"), std::string::npos);
  EXPECT_NE(message({0, 5, 12, 16}).find("crosses the row boundary 8"), std::string::npos);
  // Packed attention needs causal self-attention.
  const Tensor q = Tensor::randn({1, 1, 8, 4});
  const SequenceBoundaries s = make_sequence_boundaries({0, 3, 8}, 1, 8, kCPU);
  EXPECT_THROW(
      (void)scaled_dot_product_attention(q, q, q, false, {}, 0.0, nullptr, {}, {}, s.attention),
      ValueError);
  const SequenceBoundaries other = make_sequence_boundaries({0, 3, 9}, 1, 9, kCPU);
  EXPECT_THROW(
      (void)scaled_dot_product_attention(q, q, q, true, {}, 0.0, nullptr, {}, {}, other.attention),
      ValueError);
}

// The census's FLOPs are the sequences' causal pairs, not the row's: sequences of 3 and 5 in a
// row of 8 see 3 * 3 / 2 + 5 * 5 / 2 = 17 pairs (of 32 unpacked).
TEST(PackedAttention, CensusCountsTheSequencesPairs) {
  const Tensor q = Tensor::empty({1, 2, 8, 4}, DType::f32, kMeta);
  const SequenceBoundaries s = make_sequence_boundaries({0, 3, 8}, 1, 8, kMeta);
  KernelCensus census;
  {
    KernelCensusScope open(census);
    (void)scaled_dot_product_attention(q, q, q, true, {}, 0.0, nullptr, {}, {}, s.attention);
    (void)scaled_dot_product_attention(q, q, q, true);
  }
  std::vector<double> flops;
  for (const KernelLaunch& l : census.launches()) {
    if (std::string(l.family) == "attention") flops.push_back(l.work.flops);
  }
  ASSERT_EQ(flops.size(), 2u);
  EXPECT_EQ(flops[0], 4.0 * 2 * 17 * 4);
  EXPECT_EQ(flops[1], 4.0 * 2 * 32 * 4);
}

}  // namespace
}  // namespace headroom
