// What the op harness cannot see for the point-wise ops: accuracy of the vectorised exp / tanh
// against the C library, values and gradients against PyTorch (tests/fixtures/ops/
// pointwise_golden.txt, written by tools/gen_pointwise_golden.py), the dropout mask's definition
// and reproducibility, embedding's errors and scatter-add, and what each op keeps for backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "backend/cpu/pointwise_simd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/kernel_census.h"
#include "core/philox.h"
#include "memory/device_memory.h"
#include "ops/ops.h"

namespace headroom {
namespace {

// Largest |approx - exact| / |exact| over x in [lo, hi] with the given step, in double.
template <typename Approx, typename Exact>
double max_relative_error(Approx approx, Exact exact, double lo, double hi, double step,
                          double* worst_x) {
  double worst = 0.0;
  for (double v = lo; v <= hi; v += step) {
    const float x = static_cast<float>(v);
    const double want = exact(static_cast<double>(x));
    if (want == 0.0) continue;
    const double err = std::abs(static_cast<double>(approx(x)) - want) / std::abs(want);
    if (err > worst) {
      worst = err;
      *worst_x = x;
    }
  }
  return worst;
}

TEST(PointwiseMath, TanhMatchesStdTanhOverADenseRange) {
  double worst_x = 0.0;
  // 4.8 million points through both branches (|x| < 0.625 and beyond) and the saturated tails.
  const double err = max_relative_error(
      cpu::tanh_approx, [](double x) { return std::tanh(x); }, -12.0, 12.0, 5e-6, &worst_x);
  EXPECT_LT(err, 1.5e-7) << "worst at x = " << worst_x;
  // Tiny arguments: tanh(x) = x to float precision, subnormals included.
  for (float x : {1e-30f, -3e-20f, 1e-10f, 1e-40f, -1e-44f, 0.0f}) {
    EXPECT_EQ(cpu::tanh_approx(x), x) << x;
  }
  EXPECT_EQ(cpu::tanh_approx(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(cpu::tanh_approx(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_EQ(cpu::tanh_approx(1e30f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::tanh_approx(std::numeric_limits<float>::quiet_NaN())));
}

TEST(PointwiseMath, ExpMatchesStdExpAndHandlesItsLimits) {
  double worst_x = 0.0;
  const double err = max_relative_error(
      cpu::exp_approx, [](double x) { return std::exp(x); }, -87.0, 88.0, 5e-5, &worst_x);
  EXPECT_LT(err, 1e-7) << "worst at x = " << worst_x;
  EXPECT_EQ(cpu::exp_approx(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_approx(-100.0f), 0.0f);
  EXPECT_EQ(cpu::exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isfinite(cpu::exp_approx(std::numeric_limits<float>::infinity())));
  EXPECT_GT(cpu::exp_approx(1000.0f), 1e38f);
  EXPECT_TRUE(std::isnan(cpu::exp_approx(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(cpu::exp_approx(-std::numeric_limits<float>::quiet_NaN())));
}

// The same functions inside the kernels (the AVX-512 clone where the CPU has it), through the ops:
// gelu and silu over 2^21 points against the formulas in double.
TEST(PointwiseMath, KernelsMatchTheFormulasInDouble) {
  const int64_t n = 1 << 21;
  std::vector<float> xs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    xs[static_cast<size_t>(i)] = -12.0f + 24.0f * static_cast<float>(i) / n;
  const Tensor x = Tensor::from_floats(xs, {n});
  const std::vector<float> g = gelu(x).to_float_vector(), s = silu(x).to_float_vector();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    const double t = std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
    const double want_gelu = 0.5 * v * (1.0 + t);
    // 0.5 x (1 + t) cancels for negative x: an error e in t costs 0.5 |x| e.
    ASSERT_NEAR(g[i], want_gelu, 4e-7 * std::abs(want_gelu) + 1e-7 * std::abs(v)) << "gelu " << v;
    const double want_silu = v / (1.0 + std::exp(-v));
    ASSERT_NEAR(s[i], want_silu, 4e-7 * std::abs(want_silu) + 1e-30) << "silu " << v;
  }
}

// One case of the golden file: named float vectors and the shape they share.
struct GoldenCase {
  std::string name, op;
  int64_t rows = 0, cols = 0, dim = 0;
  std::map<std::string, std::vector<float>> values;
};

std::vector<GoldenCase> read_golden() {
  std::ifstream in(std::string(HEADROOM_FIXTURES_DIR) + "/ops/pointwise_golden.txt");
  EXPECT_TRUE(in.good()) << "missing tests/fixtures/ops/pointwise_golden.txt";
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (key == "case") {
      GoldenCase c;
      fields >> c.name >> c.op >> c.rows >> c.cols >> c.dim;
      cases.push_back(c);
    } else {
      std::vector<float>& v = cases.back().values[key];
      // strtof, not stof: stof throws on the subnormals PyTorch prints for tiny gradients.
      for (std::string word; fields >> word;) v.push_back(std::strtof(word.c_str(), nullptr));
    }
  }
  return cases;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-6 * std::abs(want[i]) + 1e-6) << what << " element " << i;
  }
}

TEST(PointwiseGolden, MatchesPyTorch) {
  const std::vector<GoldenCase> cases = read_golden();
  ASSERT_EQ(cases.size(), 8u);
  for (const GoldenCase& c : cases) {
    const Shape shape{c.rows, c.cols};
    const Tensor dy = Tensor::from_floats(c.values.at("dy"), shape);
    if (c.op == "swiglu") {
      Tensor gate = Tensor::from_floats(c.values.at("gate"), shape).set_requires_grad();
      Tensor up = Tensor::from_floats(c.values.at("up"), shape).set_requires_grad();
      const Tensor y = swiglu(gate, up);
      backward(y, dy);
      expect_close(y.to_float_vector(), c.values.at("y"), c.name + " y");
      expect_close(gate.grad().to_float_vector(), c.values.at("dgate"), c.name + " dgate");
      expect_close(up.grad().to_float_vector(), c.values.at("dup"), c.name + " dup");
      continue;
    }
    Tensor x = Tensor::from_floats(c.values.at("x"), shape).set_requires_grad();
    Tensor y;
    if (c.op == "gelu")
      y = gelu(x);
    else if (c.op == "silu")
      y = silu(x);
    else if (c.op == "softmax")
      y = softmax(x, c.dim);
    ASSERT_TRUE(y.defined()) << "unknown op " << c.op;
    backward(y, dy);
    expect_close(y.to_float_vector(), c.values.at("y"), c.name + " y");
    expect_close(x.grad().to_float_vector(), c.values.at("dx"), c.name + " dx");
  }
}

// Growth of allocated CPU bytes while `fn` runs and its result is alive.
template <typename Fn>
int64_t bytes_kept(Fn fn) {
  const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
  const Tensor out = fn();
  return static_cast<int64_t>(memory_allocated(kCPU)) - before;
}

TEST(PointwiseMemory, ForwardKeepsOnlyItsOutput) {
  // The inputs are saved by reference and softmax saves its own output: no other buffer lives
  // on until backward, in fp32 or in bf16 (whose fp32 working copies are freed on return).
  for (DType dtype : {DType::f32, DType::bf16}) {
    Generator gen(3);
    const Tensor x = Tensor::randn({64, 64}, dtype, kCPU, &gen).set_requires_grad();
    const Tensor w = Tensor::randn({64, 64}, dtype, kCPU, &gen).set_requires_grad();
    const Tensor ids = Tensor::from_ints({1, 5, 5, 63, 0, 2, 9, 5}, {8}, DType::i64);
    const int64_t full = 64 * 64 * static_cast<int64_t>(dtype_size(dtype));
    EXPECT_EQ(bytes_kept([&] { return gelu(x); }), full);
    EXPECT_EQ(bytes_kept([&] { return silu(x); }), full);
    EXPECT_EQ(bytes_kept([&] { return swiglu(x, w); }), full);
    EXPECT_EQ(bytes_kept([&] { return softmax(x, 0); }), full);
    EXPECT_EQ(bytes_kept([&] { return dropout(x, 0.5, true, &gen); }), full);
    EXPECT_EQ(bytes_kept([&] { return embedding(w, ids); }), full / 8);
  }
}

TEST(Dropout, MaskIsUniformAtLeastP) {
  // Element i is kept exactly when Tensor::rand from the same generator state puts u >= p at i.
  const double p = 0.3;
  Generator a(77), b(77);
  a.set_offset(5);
  b.set_offset(5);
  const Tensor x = Tensor::ones({3, 1001});
  const std::vector<float> out = dropout(x, p, true, &a).to_float_vector();
  const std::vector<float> u = Tensor::rand({3, 1001}, DType::f32, kCPU, &b).to_float_vector();
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], u[i] >= p ? scale : 0.0f) << "element " << i << ", u = " << u[i];
  }
  EXPECT_EQ(a.offset(), b.offset()) << "dropout must reserve as much of the stream as rand";
  EXPECT_EQ(a.offset(), 5u + philox_blocks_for(3 * 1001));
}

TEST(Dropout, SameGeneratorStateGivesTheSameMask) {
  Generator gen(11);
  const Tensor x = Tensor::randn({257, 33}, DType::f32, kCPU, &gen);
  gen.set_offset(1000);
  const std::vector<float> first = dropout(x, 0.25, true, &gen).to_float_vector();
  const std::vector<float> next = dropout(x, 0.25, true, &gen).to_float_vector();
  gen.set_offset(1000);
  const std::vector<float> again = dropout(x, 0.25, true, &gen).to_float_vector();
  EXPECT_EQ(first, again);
  EXPECT_NE(first, next) << "a second call must draw a fresh mask";
}

TEST(Dropout, KeptFractionIsOneMinusP) {
  Generator gen(5);
  const int64_t n = 1 << 20;
  const Tensor x = Tensor::ones({n});
  for (double p : {0.1, 0.5, 0.9}) {
    const std::vector<float> out = dropout(x, p, true, &gen).to_float_vector();
    int64_t kept = 0;
    for (float v : out) kept += v != 0.0f;
    const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1.0 - p, 5.0 * sigma) << p;
  }
}

TEST(Dropout, BackwardRegeneratesTheForwardMask) {
  Generator gen(9);
  const Tensor x = Tensor::randn({5, 4099}, DType::f32, kCPU, &gen).set_requires_grad();
  const Tensor dy = Tensor::randn({5, 4099}, DType::f32, kCPU, &gen);
  const Tensor y = dropout(x, 0.4, true, &gen);
  // Draws between forward and backward must not disturb the mask.
  Tensor::rand({1000}, DType::f32, kCPU, &gen);
  backward(y, dy);
  const std::vector<float> xv = x.to_float_vector(), yv = y.to_float_vector();
  const std::vector<float> dyv = dy.to_float_vector(), gv = x.grad().to_float_vector();
  const float scale = static_cast<float>(1.0 / 0.6);
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool kept = yv[i] != 0.0f;
    ASSERT_EQ(gv[i], kept ? dyv[i] * scale : 0.0f) << "element " << i;
    if (kept) {
      ASSERT_EQ(yv[i], xv[i] * scale) << "element " << i;
    }
  }
}

// The fused op is the two ops' values and gradients bit for bit, in every dtype pairing a
// residual stream has (f32 residual and a bf16 branch under autocast, pure bf16, f32).
TEST(Dropout, DropoutAddIsAddOfDropoutBitForBit) {
  const std::pair<DType, DType> pairings[] = {{DType::f32, DType::f32},
                                              {DType::f32, DType::bf16},
                                              {DType::bf16, DType::bf16},
                                              {DType::f16, DType::f16},
                                              {DType::bf16, DType::f32}};
  for (const auto& [residual_dtype, x_dtype] : pairings) {
    for (double p : {0.1, 0.5, 1.0}) {
      Generator data(31);
      // 5 x 4099: several chunks and threads, the last chunk not a multiple of 4.
      const Tensor r = Tensor::randn({5, 4099}, DType::f32, kCPU, &data).to(residual_dtype);
      const Tensor x = scale(Tensor::randn({5, 4099}, DType::f32, kCPU, &data), 3.0).to(x_dtype);
      const Tensor dy_f32 = Tensor::randn({5, 4099}, DType::f32, kCPU, &data);
      std::vector<uint64_t> offsets;  // the generator after each: the same draw
      auto run = [&](bool fused) {
        const Tensor rr = r.detach().set_requires_grad();
        const Tensor xx = x.detach().set_requires_grad();
        Generator gen(77);
        gen.set_offset(5);
        const Tensor y =
            fused ? dropout_add(rr, xx, p, true, &gen) : add(rr, dropout(xx, p, true, &gen));
        backward(y, dy_f32.to(y.dtype()));
        offsets.push_back(gen.offset());
        return std::vector<Tensor>{y, rr.grad(), xx.grad()};
      };
      const std::vector<Tensor> fused = run(true), separate = run(false);
      const std::string what =
          str_cat(dtype_name(residual_dtype), " + ", dtype_name(x_dtype), " p ", p);
      EXPECT_EQ(offsets[0], offsets[1]) << what;
      for (size_t i = 0; i < fused.size(); ++i) {
        ASSERT_EQ(fused[i].dtype(), separate[i].dtype()) << what << " result " << i;
        EXPECT_EQ(fused[i].to_float_vector(), separate[i].to_float_vector())
            << what << " result " << i;
      }
    }
  }
}

TEST(Dropout, DropoutAddIsOneKernelAndAddWhenOff) {
  const Tensor r = Tensor::randn({3, 8});
  const Tensor x = Tensor::randn({3, 8});
  KernelCensus census;
  {
    KernelCensusScope open(census);
    (void)dropout_add(r, x, 0.2);
  }
  ASSERT_EQ(census.launches().size(), 1u);
  EXPECT_STREQ(census.launches()[0].entry, "apply_add");
  EXPECT_EQ(dropout_add(r, x, 0.2, false).to_float_vector(), add(r, x).to_float_vector());
  EXPECT_EQ(dropout_add(r, x, 0.0).to_float_vector(), add(r, x).to_float_vector());
  // A broadcast residual takes the two ops.
  const Tensor row = Tensor::randn({8});
  Generator a(3), b(3);
  EXPECT_EQ(dropout_add(row, x, 0.5, true, &a).to_float_vector(),
            add(row, dropout(x, 0.5, true, &b)).to_float_vector());
  try {
    (void)dropout_add(r, x, 1.5);
    ADD_FAILURE() << "p = 1.5 accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("dropout_add: p = 1.5"), std::string::npos) << e.what();
  }
}

TEST(Dropout, EdgeValuesOfP) {
  const Tensor x = Tensor::randn({4, 9}).set_requires_grad();
  EXPECT_EQ(dropout(x, 0.0).data_ptr(), x.data_ptr()) << "p = 0 returns x itself";
  EXPECT_EQ(dropout(x, 0.7, false).data_ptr(), x.data_ptr()) << "eval mode returns x itself";
  for (float v : dropout(x, 1.0).to_float_vector()) EXPECT_EQ(v, 0.0f);
  for (double p : {-0.1, 1.5, std::nan("")}) {
    try {
      dropout(x, p);
      ADD_FAILURE() << "p = " << p << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("dropout: p ="), std::string::npos) << e.what();
    }
  }
}

TEST(Embedding, GathersRowsAndScatterAddsGradients) {
  Generator gen(21);
  const Tensor weight = Tensor::randn({6, 70}, DType::f32, kCPU, &gen).set_requires_grad();
  const std::vector<int64_t> id_values = {4, 0, 4, 5, 4, 2};
  for (DType id_dtype : {DType::i32, DType::i64}) {
    weight.set_grad(Tensor());
    const Tensor ids = Tensor::from_ints(id_values, {2, 3}, id_dtype);
    const Tensor dy = Tensor::randn({2, 3, 70}, DType::f32, kCPU, &gen);
    const Tensor y = embedding(weight, ids);
    ASSERT_EQ(y.shape(), (Shape{2, 3, 70}));
    backward(y, dy);
    const std::vector<float> w = weight.to_float_vector(), yv = y.to_float_vector();
    const std::vector<float> dyv = dy.to_float_vector(), g = weight.grad().to_float_vector();
    std::vector<double> want(g.size(), 0.0);
    for (size_t t = 0; t < id_values.size(); ++t) {
      for (size_t c = 0; c < 70; ++c) {
        EXPECT_EQ(yv[t * 70 + c], w[static_cast<size_t>(id_values[t]) * 70 + c]);
        want[static_cast<size_t>(id_values[t]) * 70 + c] += dyv[t * 70 + c];
      }
    }
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
  }
}

TEST(Embedding, OutOfRangeIdNamesIdPositionAndTableSize) {
  const Tensor weight = Tensor::randn({10, 4});
  for (int64_t bad : {10, -1}) {
    const Tensor ids = Tensor::from_ints({1, 2, 3, 4, bad, 6}, {2, 3}, DType::i32);
    try {
      embedding(weight, ids);
      ADD_FAILURE() << "id " << bad << " accepted";
    } catch (const IndexError& e) {
      const std::string want = "embedding: id " + std::to_string(bad) +
                               " at ids[1, 1] is out of range for 10 embeddings";
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
  EXPECT_THROW(embedding(weight, Tensor::from_floats({1.0f}, {1})), ValueError);
  EXPECT_THROW(embedding(Tensor::randn({10}), Tensor::from_ints({1}, {1})), ValueError);
}

TEST(Activation, SwigluRejectsMismatchedShapes) {
  try {
    swiglu(Tensor::randn({2, 3}), Tensor::randn({3, 2}));
    ADD_FAILURE() << "accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("swiglu: gate [2, 3] and up [3, 2]"), std::string::npos)
        << e.what();
  }
}

TEST(Softmax, StableForLargeInputsAndExactZerosForMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x =
      Tensor::from_floats({1000.0f, 999.0f, -inf, 1000.0f, 3.0f, 2.0f, -inf, 3.0f}, {2, 4});
  const std::vector<float> y = softmax(x).to_float_vector();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(y[4 * r + 2], 0.0f);
    EXPECT_NEAR(y[4 * r + 0], y[4 * r + 3], 1e-7);
    EXPECT_NEAR(y[4 * r + 0] + y[4 * r + 1] + y[4 * r + 3], 1.0f, 1e-6);
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], y[4 + i], 1e-6) << "shift invariance";
}

}  // namespace
}  // namespace headroom
