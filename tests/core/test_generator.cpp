// Philox4x32-10 against Random123's known-answer vectors, the stream layout shared by CPU and
// CUDA, and the uniform / normal transforms.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/generator.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace headroom {
namespace {

// Random123 tests/kat_vectors, "philox4x32 10" lines: counter, key -> output.
TEST(Philox, KnownAnswerVectors) {
  struct Case {
    Philox4x32Block counter;
    uint32_t key0, key1;
    uint32_t expected[4];
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case& c : cases) {
    const Philox4x32Block out = philox4x32_10(c.counter, c.key0, c.key1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.word[i], c.expected[i]) << "word " << i;
  }
}

TEST(Philox, StreamLayoutSplitsSeedAndBlockIndex) {
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t index = 0x85a308d3243f6a88ull;
  const Philox4x32Block a = philox_block(seed, index);
  const Philox4x32Block b = philox4x32_10({{0x243f6a88, 0x85a308d3, 0, 0}}, 0xa4093822, 0x299f31d0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.word[i], b.word[i]);
}

TEST(Philox, UniformUsesTheTop24BitsOfEachWord) {
  const Philox4x32Block block = philox_block(7, 3);
  for (uint64_t i = 0; i < 4; ++i) {
    const float expected = static_cast<float>(block.word[i] >> 8) / 16777216.0f;
    EXPECT_EQ(philox_uniform(7, 3, i, 0.0f, 1.0f), expected);
  }
  // Element 5 of a draw at offset 3 is word 1 of block 4.
  EXPECT_EQ(philox_uniform(7, 3, 5, 0.0f, 1.0f),
            static_cast<float>(philox_block(7, 4).word[1] >> 8) / 16777216.0f);
}

// Our log / sincos polynomials are deterministic across host and device; they must also be
// accurate. Compare Box-Muller in double precision.
TEST(Philox, NormalMatchesDoublePrecisionBoxMuller) {
  for (uint64_t i = 0; i < 4096; ++i) {
    const Philox4x32Block block = philox_block(1234, 10 + i / 4);
    const unsigned pair = static_cast<unsigned>(i % 4) / 2;
    const double u1 = ((block.word[2 * pair] >> 8) + 1.0) / 16777216.0;
    const double u2 = (block.word[2 * pair + 1] >> 8) / 16777216.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double expected = r * (i % 2 == 0 ? std::cos(2 * M_PI * u2) : std::sin(2 * M_PI * u2));
    EXPECT_NEAR(philox_standard_normal(1234, 10, i), expected, 2e-6 * std::max(1.0, r)) << i;
  }
}

TEST(Philox, LogIsAccurateOverTheUnitInterval) {
  for (uint32_t k = 1; k <= (1u << 24); k += 997) {
    const float u = static_cast<float>(k) / 16777216.0f;
    // philox_log is an fp32 approximation: within 4e-7 relative (a few fp32 ulps) of ln u, and
    // 4e-7 absolute near u = 1, where ln u vanishes and relative error has no meaning.
    EXPECT_NEAR(philox_log(u), std::log(static_cast<double>(u)),
                4e-7 * std::max(1.0, -std::log(static_cast<double>(u))));
  }
}

TEST(Generator, ReserveAdvancesByWholeBlocks) {
  Generator g(42);
  EXPECT_EQ(g.reserve(5).offset, 0u);
  EXPECT_EQ(g.offset(), 2u);
  EXPECT_EQ(g.reserve(4).offset, 2u);
  EXPECT_EQ(g.offset(), 3u);
  g.manual_seed(9);
  EXPECT_EQ(g.seed(), 9u);
  EXPECT_EQ(g.offset(), 0u);
}

TEST(Generator, SameSeedSameNumbersAcrossShapesAndDtypes) {
  Generator a(5), b(5);
  const auto x = Tensor::rand({3, 7}, DType::f32, kCPU, &a).to_float_vector();
  const auto y = Tensor::rand({21}, DType::f32, kCPU, &b).to_float_vector();
  EXPECT_EQ(x, y);
  // A second draw continues the stream rather than repeating it.
  const auto z = Tensor::rand({21}, DType::f32, kCPU, &b).to_float_vector();
  EXPECT_NE(y, z);
  // bf16 draws are the f32 draws rounded.
  Generator c(5);
  const auto w = Tensor::rand({21}, DType::bf16, kCPU, &c).to_float_vector();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], y[i], 0.004);
}

TEST(Generator, NonContiguousDrawFillsInRowMajorOrder) {
  Generator a(11), b(11);
  Tensor t = Tensor::zeros({4, 6}).transpose(0, 1);  // shape [6, 4], not contiguous
  t.uniform_(0.0, 1.0, &a);
  const auto expected = Tensor::rand({6, 4}, DType::f32, kCPU, &b).to_float_vector();
  EXPECT_EQ(t.to_float_vector(), expected);
}

TEST(Generator, UniformAndNormalMoments) {
  Generator g(2024);
  const auto u = Tensor::rand({1 << 18}, DType::f32, kCPU, &g).to_float_vector();
  double mean = std::accumulate(u.begin(), u.end(), 0.0) / u.size();
  double var = 0;
  for (float v : u) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    var += (v - mean) * (v - mean);
  }
  var /= u.size();
  EXPECT_NEAR(mean, 0.5, 0.003);
  EXPECT_NEAR(var, 1.0 / 12.0, 0.001);

  Tensor n = Tensor::empty({1 << 18});
  n.normal_(3.0, 2.0, &g);
  const auto v = n.to_float_vector();
  mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  var = 0;
  for (float x : v) var += (x - mean) * (x - mean);
  var /= v.size();
  EXPECT_NEAR(mean, 3.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 2.0, 0.02);
}

TEST(Generator, UniformRespectsBounds) {
  Generator g(3);
  const auto u = Tensor::empty({10000}).uniform_(-2.0, 5.0, &g).to_float_vector();
  for (float v : u) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 5.0f);
  }
}

}  // namespace
}  // namespace headroom
