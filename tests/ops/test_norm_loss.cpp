// Tests of layer_norm, rms_norm, cross_entropy and linear_cross_entropy beyond the op harness:
// PyTorch golden values, memory kept for backward and peak memory (allocator statistics), the
// fused LM-head loss against the unfused ops, determinism over thread counts, error messages.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/kernel_census.h"
#include "memory/device_memory.h"
#include "ops/ops.h"

namespace headroom {
namespace {

struct GoldenTensor {
  Shape shape;
  std::vector<double> values;
};

// case -> field -> tensor, from tests/fixtures/ops/norm_loss_golden.txt.
std::map<std::string, std::map<std::string, GoldenTensor>> load_golden() {
  const std::string path = std::string(HEADROOM_FIXTURES_DIR) + "/ops/norm_loss_golden.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::map<std::string, std::map<std::string, GoldenTensor>> golden;
  std::string text;
  while (std::getline(in, text)) {
    if (text.empty() || text[0] == '#') continue;
    std::istringstream line(text);
    std::string name, field, dims;
    line >> name >> field >> dims;
    GoldenTensor t;
    if (dims != "scalar") {
      std::vector<int64_t> d;
      std::istringstream ds(dims);
      for (std::string part; std::getline(ds, part, ',');) d.push_back(std::stoll(part));
      t.shape = Shape(d);
    }
    for (double v; line >> v;) t.values.push_back(v);
    golden[name][field] = t;
  }
  return golden;
}

Tensor golden_tensor(const GoldenTensor& g, bool requires_grad = false) {
  std::vector<float> v(g.values.begin(), g.values.end());
  Tensor t = Tensor::from_floats(v, g.shape);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor golden_ids(const GoldenTensor& g) {
  std::vector<int64_t> v;
  for (double d : g.values) v.push_back(static_cast<int64_t>(d));
  return Tensor::from_ints(v, g.shape);
}

// |a - b| <= 1e-5 |b| + 1e-6 max|b|, element by element.
void expect_close(const Tensor& actual, const GoldenTensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(actual.shape(), expected.shape) << what;
  const std::vector<float> a = actual.to(DType::f32).to_float_vector();
  double largest = 0.0;
  for (double v : expected.values) largest = std::max(largest, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    const double b = expected.values[i];
    EXPECT_NEAR(a[i], b, 1e-5 * std::abs(b) + 1e-6 * largest) << what << ", element " << i;
  }
}

TEST(NormLossGolden, LayerNormMatchesTorch) {
  auto golden = load_golden();
  for (const char* name : {"layer_norm_affine", "layer_norm_plain"}) {
    auto& g = golden.at(name);
    const bool affine = g.count("weight") > 0;
    Tensor x = golden_tensor(g.at("x"), true);
    Tensor w = affine ? golden_tensor(g.at("weight"), true) : Tensor();
    Tensor b = affine ? golden_tensor(g.at("bias"), true) : Tensor();
    Tensor y = layer_norm(x, w, b, g.at("eps").values[0]);
    expect_close(y, g.at("out"), std::string(name) + " out");
    backward(y, golden_tensor(g.at("gy")));
    expect_close(x.grad(), g.at("dx"), std::string(name) + " dx");
    if (affine) {
      expect_close(w.grad(), g.at("dweight"), std::string(name) + " dweight");
      expect_close(b.grad(), g.at("dbias"), std::string(name) + " dbias");
    }
  }
}

TEST(NormLossGolden, RmsNormMatchesLlamaRmsNorm) {
  auto golden = load_golden();
  auto& g = golden.at("rms_norm");
  Tensor x = golden_tensor(g.at("x"), true);
  Tensor w = golden_tensor(g.at("weight"), true);
  Tensor y = rms_norm(x, w, g.at("eps").values[0]);
  expect_close(y, g.at("out"), "rms_norm out");
  backward(y, golden_tensor(g.at("gy")));
  expect_close(x.grad(), g.at("dx"), "rms_norm dx");
  expect_close(w.grad(), g.at("dweight"), "rms_norm dweight");
}

TEST(NormLossGolden, CrossEntropyMatchesTorch) {
  auto golden = load_golden();
  for (const char* name : {"cross_entropy_2d", "cross_entropy_3d"}) {
    auto& g = golden.at(name);
    Tensor logits = golden_tensor(g.at("logits"), true);
    const auto ignore = static_cast<int64_t>(g.at("ignore_index").values[0]);
    Tensor loss = cross_entropy(logits, golden_ids(g.at("targets")), ignore);
    expect_close(loss, g.at("loss"), std::string(name) + " loss");
    backward(loss);
    expect_close(logits.grad(), g.at("dlogits"), std::string(name) + " dlogits");
  }
}

Tensor random_ids(int64_t n, int64_t limit, double ignored_fraction, uint64_t seed,
                  DType dtype = DType::i64) {
  Generator gen(seed);
  const std::vector<float> u = Tensor::rand({n}, DType::f32, kCPU, &gen).to_float_vector();
  const std::vector<float> d = Tensor::rand({n}, DType::f32, kCPU, &gen).to_float_vector();
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = std::min<int64_t>(limit - 1, static_cast<int64_t>(u[i] * limit));
    if (d[i] < ignored_fraction) v[i] = -100;
  }
  return Tensor::from_ints(v, {n}, dtype);
}

Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  std::vector<float> v = Tensor::randn(shape, DType::f32, kCPU, &gen).to_float_vector();
  for (float& x : v) x = static_cast<float>(x * scale);
  return Tensor::from_floats(v, shape);
}

// The loss and its gradient over a wide vocabulary, against a double-precision reference
// (checks the vectorised exp where the harness's vocabularies are small).
TEST(CrossEntropy, WideVocabularyMatchesDoubleReference) {
  const int64_t rows = 9, vocab = 1001;
  Tensor logits = randn({rows, vocab}, 3, 4.0).set_requires_grad(true);
  const Tensor targets = random_ids(rows, vocab, 0.2, 4);
  Tensor loss = cross_entropy(logits, targets);
  backward(loss);
  const std::vector<float> x = logits.to_float_vector();
  const std::vector<int64_t> t = targets.to_int64_vector();
  const std::vector<float> grad = logits.grad().to_float_vector();
  double total = 0.0;
  int64_t count = 0;
  std::vector<double> expected_grad(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == -100) continue;
    ++count;
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == -100) continue;
    double m = -1e300, s = 0.0;
    for (int64_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(x[r * vocab + j]));
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(x[r * vocab + j] - m);
    const double lse = m + std::log(s);
    total += lse - x[r * vocab + t[r]];
    for (int64_t j = 0; j < vocab; ++j) {
      expected_grad[r * vocab + j] =
          (std::exp(x[r * vocab + j] - lse) - (j == t[r] ? 1.0 : 0.0)) / count;
    }
  }
  EXPECT_NEAR(loss.item(), total / count, 1e-5 * std::abs(total / count));
  for (size_t i = 0; i < grad.size(); ++i) {
    EXPECT_NEAR(grad[i], expected_grad[i], 1e-5 * std::abs(expected_grad[i]) + 1e-9) << i;
  }
}

TEST(CrossEntropy, AllIgnoredGivesNanAndZeroGradientAsTorch) {
  Tensor logits = randn({3, 5}, 1).set_requires_grad(true);
  Tensor loss = cross_entropy(logits, Tensor::from_ints({-100, -100, -100}, {3}));
  EXPECT_TRUE(std::isnan(loss.item()));
  backward(loss);
  for (float g : logits.grad().to_float_vector()) EXPECT_EQ(g, 0.0f);
}

TEST(CrossEntropy, Int32TargetsGiveTheInt64Result) {
  const Tensor logits = randn({2, 6, 7}, 5);
  const Tensor t64 = random_ids(12, 7, 0.25, 6).reshape({2, 6});
  const Tensor t32 = random_ids(12, 7, 0.25, 6, DType::i32).reshape({2, 6});
  EXPECT_EQ(cross_entropy(logits, t64).item(), cross_entropy(logits, t32).item());
  const Tensor w = randn({4, 7}, 8);
  const Tensor u64 = random_ids(12, 4, 0.25, 9).reshape({2, 6});
  const Tensor u32 = random_ids(12, 4, 0.25, 9, DType::i32).reshape({2, 6});
  EXPECT_EQ(linear_cross_entropy(logits, w, u64).item(),
            linear_cross_entropy(logits, w, u32).item());
}

template <typename E>
void expect_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(CrossEntropy, BadTargetsAreNamed) {
  const Tensor logits = randn({3, 5}, 1);
  expect_error<IndexError>(
      [&] {
        cross_entropy(logits, Tensor::from_ints({1, 5, 0}, {3}));
      },
      "cross_entropy: target 5 at position 1 is out of range [0, 5)");
  expect_error<IndexError>(
      [&] {
        cross_entropy(logits, Tensor::from_ints({-3, 1, 0}, {3}));
      },
      "target -3 at position 0");
  expect_error<IndexError>(
      [&] {
        cross_entropy(logits, Tensor::from_ints({1, 2, -100}, {3}), 2);
      },
      "target -100 at position 2");
  expect_error<ValueError>(
      [&] {
        cross_entropy(logits, Tensor::from_ints({1, 2}, {2}));
      },
      "cross_entropy: targets [2] must have the shape [3]");
  expect_error<ValueError>([&] { cross_entropy(logits, randn({3}, 2)); },
                           "targets must be i32 or i64, not f32");
  expect_error<IndexError>(
      [&] {
        linear_cross_entropy(randn({3, 4}, 1), randn({5, 4}, 2), Tensor::from_ints({0, 9, 1}, {3}));
      },
      "linear_cross_entropy: target 9 at position 1");
  expect_error<ValueError>(
      [&] {
        linear_cross_entropy(randn({3, 4}, 1), randn({5, 3}, 2), Tensor::from_ints({0, 1, 1}, {3}));
      },
      "linear_cross_entropy: x has 4 features but weight [5, 3]");
}

TEST(Norm, BadShapesAreNamed) {
  const Tensor x = randn({3, 5}, 1);
  expect_error<ValueError>([&] { layer_norm(x, randn({4}, 2), Tensor()); },
                           "layer_norm: weight [4] must be [5]");
  expect_error<ValueError>(
      [&] {
        layer_norm(x, Tensor(), randn({5, 1}, 2));
      },
      "layer_norm: bias [5, 1] must be [5]");
  expect_error<ValueError>([&] { rms_norm(x, randn({6}, 2)); }, "rms_norm: weight [6] must be [5]");
}

// Forward keeps only the output and the per-row fp32 statistics beyond the inputs.
TEST(Norm, SavesOnlyPerRowStatistics) {
  const int64_t rows = 256, dim = 64;
  Tensor x = randn({rows, dim}, 1).set_requires_grad(true);
  Tensor w = randn({dim}, 2).set_requires_grad(true);
  Tensor b = randn({dim}, 3).set_requires_grad(true);
  const int64_t out_bytes = rows * dim * 4, row_bytes = rows * 4;
  {
    const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
    Tensor y = layer_norm(x, w, b);
    EXPECT_EQ(static_cast<int64_t>(memory_allocated(kCPU)) - before, out_bytes + 2 * row_bytes);
  }
  {
    const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
    Tensor y = rms_norm(x, w);
    EXPECT_EQ(static_cast<int64_t>(memory_allocated(kCPU)) - before, out_bytes + row_bytes);
  }
}

// The weight gradient is reduced over fixed row blocks, so it does not depend on the threads.
TEST(Norm, BackwardIsTheSameOnAnyThreadCount) {
  auto run = [](int threads) {
    const int previous = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = randn({301, 129}, 1).set_requires_grad(true);
    Tensor w = randn({129}, 2).set_requires_grad(true);
    Tensor b = randn({129}, 3).set_requires_grad(true);
    backward(layer_norm(x, w, b), randn({301, 129}, 4));
    Tensor x2 = randn({301, 129}, 1).set_requires_grad(true);
    Tensor w2 = randn({129}, 2).set_requires_grad(true);
    backward(rms_norm(x2, w2), randn({301, 129}, 4));
    omp_set_num_threads(previous);
    return std::vector<std::vector<float>>{x.grad().to_float_vector(), w.grad().to_float_vector(),
                                           b.grad().to_float_vector(), x2.grad().to_float_vector(),
                                           w2.grad().to_float_vector()};
  };
  EXPECT_EQ(run(1), run(2));
  EXPECT_EQ(run(1), run(3));
}

// add_layer_norm / add_rms_norm's results are add's and the norm's, bit for bit, for every
// dtype pairing a recipe makes: f32, pure bf16, and autocast's f32 stream with a bf16 branch
// and a bf16 result.
TEST(ResidualNorm, ForwardEqualsAddThenNormBitForBit) {
  struct Case {
    DType residual, branch;
    std::optional<DType> out;
  };
  for (const Case& c :
       {Case{DType::f32, DType::f32, std::nullopt}, Case{DType::bf16, DType::bf16, std::nullopt},
        Case{DType::f32, DType::bf16, DType::bf16}, Case{DType::f32, DType::f16, DType::f16}}) {
    const Tensor residual = randn({37, 40}, 1).to(c.residual);
    const Tensor branch = randn({37, 40}, 2).to(c.branch);
    const Tensor w = randn({40}, 3), b = randn({40}, 4);
    const Tensor sum = add(residual, branch);
    const ResidualNorm ln = add_layer_norm(residual, branch, w, b, 1e-5, c.out);
    EXPECT_EQ(ln.sum.dtype(), sum.dtype());
    EXPECT_EQ(ln.sum.to_float_vector(), sum.to_float_vector());
    EXPECT_EQ(ln.out.to_float_vector(), layer_norm(sum, w, b, 1e-5, c.out).to_float_vector());
    const ResidualNorm rms = add_rms_norm(residual, branch, w, 1e-6, c.out, 1.0);
    EXPECT_EQ(rms.sum.to_float_vector(), sum.to_float_vector());
    EXPECT_EQ(rms.out.to_float_vector(), rms_norm(sum, w, 1e-6, c.out, 1.0).to_float_vector());
    const ResidualNorm alone = add_layer_norm(residual, Tensor(), w, b, 1e-5, c.out);
    EXPECT_EQ(alone.sum.data_ptr(), residual.data_ptr());  // the residual itself, not a copy
    EXPECT_EQ(alone.out.to_float_vector(),
              layer_norm(residual, w, b, 1e-5, c.out).to_float_vector());
  }
}

// A pre-norm block's residual stream as the models run it (norm of x, a branch, the add and
// the next norm, the add after): the fused ops give the separate ops' gradients, and backward
// launches no accumulation of the stream's gradients and allocates no more at its peak.
TEST(ResidualNorm, BackwardAddsTheStreamGradientInsideTheNorm) {
  for (const bool centred : {true, false}) {
    struct Run {
      std::vector<std::vector<float>> grads;
      int accumulates = 0;
      size_t launches = 0;
      size_t peak = 0;
    };
    auto run = [&](bool fused) {
      Tensor x = randn({64, 48}, 1).set_requires_grad(true);
      Tensor p = randn({48, 48}, 2, 0.2).set_requires_grad(true);
      Tensor w1 = randn({48}, 3).set_requires_grad(true);
      Tensor w2 = randn({48}, 4).set_requires_grad(true);
      Tensor b = randn({48}, 5).set_requires_grad(true);
      auto norm = [&](const Tensor& t, const Tensor& w) {
        return centred ? layer_norm(t, w, b) : rms_norm(t, w);
      };
      auto fused_norm = [&](const Tensor& r, const Tensor& branch, const Tensor& w) {
        return centred ? add_layer_norm(r, branch, w, b) : add_rms_norm(r, branch, w);
      };
      Tensor out;
      if (fused) {
        const ResidualNorm in = fused_norm(x, Tensor(), w1);
        const ResidualNorm mid = fused_norm(in.sum, matmul(in.out, p), w2);
        out = add(mid.sum, matmul(mid.out, p));
      } else {
        const Tensor h = add(x, matmul(norm(x, w1), p));
        out = add(h, matmul(norm(h, w2), p));
      }
      Run r;
      KernelCensus census;
      reset_peak_memory_stats(kCPU);
      const size_t before = memory_allocated(kCPU);
      {
        KernelCensusScope scope(census);
        backward(out, randn({64, 48}, 6));
      }
      r.peak = max_memory_allocated(kCPU) - before;
      for (const KernelLaunch& l : census.launches()) {
        r.accumulates += std::string(l.entry) == "accumulate" ? 1 : 0;
      }
      r.launches = census.launches().size();
      for (const Tensor* t : {&x, &p, &w1, &w2, &b}) {
        r.grads.push_back(t->grad().defined() ? t->grad().to_float_vector() : std::vector<float>{});
      }
      return r;
    };
    const Run fused = run(true), separate = run(false);
    SCOPED_TRACE(centred ? "layer_norm" : "rms_norm");
    for (size_t i = 0; i < fused.grads.size(); ++i) {
      ASSERT_EQ(fused.grads[i].empty(), !centred && i == 4);  // rms_norm has no bias
      ASSERT_EQ(fused.grads[i].size(), separate.grads[i].size());
      for (size_t j = 0; j < fused.grads[i].size(); ++j) {
        // The fused backward adds the stream's gradient before rounding the norm's dx, and
        // the GEMMs add into partial sums: f32 rounding apart, not bit for bit.
        EXPECT_NEAR(fused.grads[i][j], separate.grads[i][j],
                    1e-5f * (1.0f + std::fabs(separate.grads[i][j])))
            << "gradient " << i << " element " << j;
      }
    }
    EXPECT_GT(separate.accumulates, 0);
    EXPECT_LT(fused.accumulates, separate.accumulates);
    EXPECT_LT(fused.launches, separate.launches);
    EXPECT_LE(fused.peak, separate.peak);
  }
}

// Backward of cross_entropy holds the saved logits and one gradient buffer, nothing else of
// size tokens x vocab.
TEST(CrossEntropy, BackwardPeakIsOneGradientBuffer) {
  const int64_t rows = 256, vocab = 1000;
  const int64_t logits_bytes = rows * vocab * 4;
  Tensor logits = randn({rows, vocab}, 1).set_requires_grad(true);
  const Tensor targets = random_ids(rows, vocab, 0.1, 2);
  Tensor loss = cross_entropy(logits, targets);
  const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
  reset_peak_memory_stats(kCPU);
  backward(loss);
  const int64_t growth = static_cast<int64_t>(max_memory_allocated(kCPU)) - before;
  EXPECT_GE(growth, logits_bytes);
  EXPECT_LE(growth, logits_bytes + 64 * 1024);
}

struct FusedResult {
  float loss;
  std::vector<float> dx, dweight;
  int64_t peak_growth;
};

FusedResult run_loss(bool fused, int64_t chunk_rows, const Tensor& x_value, const Tensor& w_value,
                     const Tensor& targets, double grad = 1.0) {
  Tensor x = x_value.clone().set_requires_grad(true);
  Tensor w = w_value.clone().set_requires_grad(true);
  const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
  reset_peak_memory_stats(kCPU);
  FusedResult r;
  {
    Tensor loss = !fused           ? cross_entropy(linear(x, w), targets)
                  : chunk_rows > 0 ? linear_cross_entropy_chunked(x, w, targets, -100, chunk_rows)
                                   : linear_cross_entropy(x, w, targets);
    r.loss = static_cast<float>(loss.item());
    backward(loss, Tensor::full({}, grad));
  }
  r.peak_growth = static_cast<int64_t>(max_memory_allocated(kCPU)) - before;
  r.dx = x.grad().to_float_vector();
  r.dweight = w.grad().to_float_vector();
  return r;
}

void expect_vectors_close(const std::vector<float>& a, const std::vector<float>& b,
                          const char* what) {
  ASSERT_EQ(a.size(), b.size());
  float largest = 0.0f;
  for (float v : b) largest = std::max(largest, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 2e-5f * std::abs(b[i]) + 2e-6f * largest) << what << " " << i;
  }
}

TEST(LinearCrossEntropy, EqualsCrossEntropyOfLinear) {
  const int64_t tokens = 50, dim = 24, vocab = 37;
  const Tensor x = randn({2, tokens / 2, dim}, 1);
  const Tensor w = randn({vocab, dim}, 2, 0.3);
  const Tensor targets = random_ids(tokens, vocab, 0.2, 3).reshape({2, tokens / 2});
  for (double grad : {1.0, 2.5}) {
    const FusedResult ref = run_loss(false, 0, x, w, targets, grad);
    for (int64_t chunk : {int64_t{0}, int64_t{7}, int64_t{1}, int64_t{64}}) {
      const FusedResult got = run_loss(true, chunk, x, w, targets, grad);
      EXPECT_NEAR(got.loss, ref.loss, 1e-5 * std::abs(ref.loss)) << chunk;
      expect_vectors_close(got.dx, ref.dx, "dx");
      expect_vectors_close(got.dweight, ref.dweight, "dweight");
    }
  }
}

// Note [Targets counted by the caller]: a count given by the caller replaces the op's own (one
// read-back on a GPU, a host sync in the census) and gives the same loss and gradients.
TEST(LinearCrossEntropy, ACountedTargetCountSkipsTheReadBack) {
  const int64_t tokens = 50, dim = 24, vocab = 37;
  const Tensor w = randn({vocab, dim}, 2, 0.3);
  const Tensor targets = random_ids(tokens, vocab, 0.2, 3);
  int64_t counted = 0;
  for (int64_t t : targets.to_int64_vector()) counted += t != -100;
  ASSERT_LT(counted, tokens);  // some are ignored
  auto run = [&](int64_t count, KernelCensus& census) {
    const Tensor x = randn({tokens, dim}, 1).set_requires_grad();
    Tensor loss, logits_loss;
    {
      KernelCensusScope scope(census);
      loss = linear_cross_entropy(x, w, targets, -100, count);
      logits_loss = cross_entropy(linear(x, w), targets, -100, count);
    }
    backward(loss);
    return std::tuple(loss.item(), logits_loss.item(), x.grad().to_float_vector());
  };
  KernelCensus own, given;
  const auto [loss, unfused, dx] = run(-1, own);
  const auto [loss_given, unfused_given, dx_given] = run(counted, given);
  EXPECT_EQ(loss_given, loss);
  EXPECT_EQ(unfused_given, unfused);
  EXPECT_EQ(dx_given, dx);
  auto syncs = [](const KernelCensus& c) {
    int64_t n = 0;
    for (const KernelLaunch& launch : c.launches()) n += launch.host_sync;
    return n;
  };
  EXPECT_EQ(syncs(own), 2);  // each op counted its targets
  EXPECT_EQ(syncs(given), 0);
}

// 512 tokens x vocab 4096: full logits are 8 MiB (and the unfused loss holds them and their
// gradient); the fused loss over 64-token chunks holds 1 MiB of logits plus dx and dweight.
TEST(LinearCrossEntropy, PeakStaysFarBelowFullLogits) {
  const int64_t tokens = 512, dim = 32, vocab = 4096;
  const int64_t logits_bytes = tokens * vocab * 4;
  const Tensor x = randn({tokens, dim}, 1);
  const Tensor w = randn({vocab, dim}, 2, 0.2);
  const Tensor targets = random_ids(tokens, vocab, 0.1, 3);
  const FusedResult fused = run_loss(true, 64, x, w, targets);
  const FusedResult unfused = run_loss(false, 0, x, w, targets);
  const int64_t grads = (tokens + vocab) * dim * 4;
  EXPECT_LE(fused.peak_growth, 64 * vocab * 4 + 2 * grads + 64 * 1024);
  EXPECT_LT(fused.peak_growth, logits_bytes / 4);
  EXPECT_GE(unfused.peak_growth, 2 * logits_bytes);
}

// Note [Loss chunks]: equal chunks whose buffers stay within 256 MiB, at least 128 tokens. On the
// meta device (allocations counted, nothing computed): 4096 tokens x vocab 65536 are 1 GiB of
// fp32 logits, which four chunks of 1024 tokens hold a quarter of at a time.
TEST(LinearCrossEntropy, DefaultChunkBoundsThePeak) {
  EXPECT_EQ(linear_cross_entropy_chunk_rows(50257, 16384, 6), 863);  // GPT-2, 16 x 1024, bf16
  EXPECT_EQ(linear_cross_entropy_chunk_rows(128256, 8192, 6), 342);  // Llama 3, 4 x 2048
  EXPECT_EQ(linear_cross_entropy_chunk_rows(32768, 512, 4), 512);    // 64 MiB: one chunk
  EXPECT_EQ(linear_cross_entropy_chunk_rows(int64_t{1} << 22, 1000, 4), 128);
  EXPECT_EQ(linear_cross_entropy_chunk_rows(int64_t{1} << 22, 100, 4), 100);
  const int64_t tokens = 4096, dim = 16, vocab = 65536;
  Tensor x = Tensor::empty({tokens, dim}, DType::f32, kMeta).set_requires_grad(true);
  Tensor w = Tensor::empty({vocab, dim}, DType::f32, kMeta).set_requires_grad(true);
  const Tensor targets = Tensor::empty({tokens}, DType::i64, kMeta);
  const int64_t before = static_cast<int64_t>(memory_allocated(kMeta));
  reset_peak_memory_stats(kMeta);
  {
    Tensor loss = linear_cross_entropy(x, w, targets);
    backward(loss);
  }
  const int64_t growth = static_cast<int64_t>(max_memory_allocated(kMeta)) - before;
  const int64_t grads = (tokens + vocab) * dim * 4;
  EXPECT_GE(growth, 1024 * vocab * 4);
  EXPECT_LE(growth, 1024 * vocab * 4 + 2 * grads + 64 * 1024);
}

// Without gradients no dx / dweight buffer exists: only the chunk of logits and its statistics.
TEST(LinearCrossEntropy, NoGradientBuffersWhenNoneIsNeeded) {
  const int64_t tokens = 96, dim = 32, vocab = 512;
  const Tensor x = randn({tokens, dim}, 1);
  Tensor w = randn({vocab, dim}, 2);
  const Tensor targets = random_ids(tokens, vocab, 0.0, 3);
  const int64_t chunk_bytes = 32 * vocab * 4;
  auto peak_of = [&](const std::function<Tensor()>& fn) {
    const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
    reset_peak_memory_stats(kCPU);
    Tensor loss = fn();
    return static_cast<int64_t>(max_memory_allocated(kCPU)) - before;
  };
  EXPECT_LE(peak_of([&] {
              NoGradGuard no_grad;
              w.set_requires_grad(true);
              return linear_cross_entropy_chunked(x, w, targets, -100, 32);
            }),
            chunk_bytes + 4096);
  w.set_requires_grad(true);
  // Only the weight needs a gradient: dweight [V, D] is kept, dx is not.
  const int64_t with_dweight =
      peak_of([&] { return linear_cross_entropy_chunked(x, w, targets, -100, 32); });
  EXPECT_GE(with_dweight, chunk_bytes + vocab * dim * 4);
  EXPECT_LE(with_dweight, chunk_bytes + vocab * dim * 4 + 4096);
}

}  // namespace
}  // namespace headroom
