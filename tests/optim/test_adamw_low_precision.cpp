// AdamW on bf16 / f16 parameters without an fp32 master copy (round to nearest, stochastic
// rounding, Kahan compensation) and with bf16 states: the arithmetic against the fp32 update,
// unbiasedness of the rounding, and the bytes of state through allocator statistics.
#include <gtest/gtest.h>

#include <cmath>

#include "memory/device_memory.h"
#include "optim/adamw.h"

namespace headroom {
namespace {

Tensor leaf(const Tensor& values) {
  Tensor t = values;
  t.set_requires_grad(true);
  return t;
}

// `steps` AdamW steps on an fp32 copy of `start` with gradients `grads` (one per step).
std::vector<float> fp32_trajectory(const Tensor& start, const std::vector<Tensor>& grads,
                                   const AdamWOptions& options) {
  Tensor p = leaf(start.to(DType::f32).clone());  // to() of an f32 tensor is the tensor itself
  AdamWOptions o = options;
  o.state_dtype = DType::f32;
  AdamW optimizer({p}, o);
  for (const Tensor& g : grads) {
    p.set_grad(g.to(DType::f32));
    optimizer.step();
  }
  return p.to_float_vector();
}

TEST(AdamWLowPrecision, RoundToNearestEqualsTheFp32UpdateRoundedOnce) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    Generator gen(3);
    const Tensor start = Tensor::randn({1000}, DType::f32, kCPU, &gen).to(dtype);
    const Tensor grad = Tensor::randn({1000}, DType::f32, kCPU, &gen).to(dtype);
    const AdamWOptions options{.lr = 0.01, .stochastic_rounding = false};
    Tensor p = leaf(start.clone());
    AdamW optimizer({p}, options);
    p.set_grad(grad);
    optimizer.step();
    const std::vector<float> expected = fp32_trajectory(start, {grad}, options);
    const std::vector<float> got = p.to_float_vector();
    const Tensor rounded = Tensor::from_floats(expected, {1000}).to(dtype);
    EXPECT_EQ(got, rounded.to_float_vector()) << dtype_name(dtype);
    EXPECT_EQ(p.dtype(), dtype);
  }
}

// Updates far below half an ulp of bf16 (1.0's ulp is 2^-7): round to nearest never moves the
// parameter; stochastic rounding and Kahan compensation track the fp32 trajectory.
TEST(AdamWLowPrecision, SmallUpdatesSurviveStochasticRoundingAndKahan) {
  const int64_t n = 1 << 14;
  const int steps = 20;
  const Tensor start = Tensor::ones({n}, DType::bf16);
  const Tensor grad = Tensor::ones({n}, DType::bf16);
  std::vector<Tensor> grads(steps, grad);
  const AdamWOptions base{.lr = 1e-4, .weight_decay = 0.0};
  const float exact = fp32_trajectory(start, grads, base)[0];
  ASSERT_NEAR(exact, 1.0f - steps * 1e-4f, 1e-5f);

  auto run = [&](AdamWOptions options) {
    Tensor p = leaf(start.clone());
    AdamW optimizer({p}, options);
    for (int s = 0; s < steps; ++s) {
      p.set_grad(grad);
      optimizer.step();
    }
    double mean = 0.0;
    for (float v : p.to_float_vector()) mean += v;
    return std::pair{p, mean / n};
  };
  AdamWOptions nearest = base;
  nearest.stochastic_rounding = false;
  EXPECT_EQ(run(nearest).second, 1.0);

  // Stochastic: each element is 1 or 1 - 2^-8 (the lower neighbour); the mean is unbiased.
  const auto [sr_param, sr_mean] = run(base);
  EXPECT_NEAR(sr_mean, exact, 4e-5);  // binomial noise: sd ~ 2^-8 * sqrt(p(1-p)/n) ~ 1.5e-5
  EXPECT_NE(sr_mean, 1.0);

  // Kahan: parameter plus compensation is the fp32 trajectory to bf16 precision of the
  // compensation (|comp| < ulp(p) so its own rounding error is ~2^-9 * 2^-8).
  AdamWOptions kahan = base;
  kahan.kahan_summation = true;
  Tensor p = leaf(start.clone());
  AdamW optimizer({p}, kahan);
  for (int s = 0; s < steps; ++s) {
    p.set_grad(grad);
    optimizer.step();
  }
  const std::vector<float> values = p.to_float_vector();
  const std::vector<float> comp = optimizer.state(0, 0).compensation.to_float_vector();
  for (int64_t i = 0; i < n; i += 997) {
    EXPECT_NEAR(values[i] + comp[i], exact, 2e-5) << i;
  }
}

TEST(AdamWLowPrecision, StochasticRoundingIsReproducibleFromTheSeed) {
  auto run = [](uint64_t seed) {
    Generator gen(9);
    Tensor p = leaf(Tensor::randn({5000}, DType::f32, kCPU, &gen).to(DType::bf16));
    const Tensor g = Tensor::randn({5000}, DType::f32, kCPU, &gen).to(DType::bf16);
    AdamW optimizer({p}, {.lr = 1e-3, .rounding_seed = seed});
    for (int s = 0; s < 3; ++s) {
      p.set_grad(g);
      optimizer.step();
    }
    return p.to_float_vector();
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

TEST(AdamWLowPrecision, StateBytesPerElementFollowTheOptions) {
  const int64_t n = 1 << 16;
  auto state_bytes = [&](DType param_dtype, AdamWOptions options) {
    Tensor p = leaf(Tensor::zeros({n}, param_dtype));
    p.set_grad(Tensor::ones({n}, param_dtype));
    AdamW optimizer({p}, options);
    const size_t before = memory_allocated(kCPU);
    optimizer.step();
    return (memory_allocated(kCPU) - before) / n;
  };
  EXPECT_EQ(state_bytes(DType::f32, {}), 8u);
  EXPECT_EQ(state_bytes(DType::f32, {.state_dtype = DType::bf16}), 4u);
  EXPECT_EQ(state_bytes(DType::bf16, {.state_dtype = DType::bf16}), 4u);
  EXPECT_EQ(state_bytes(DType::bf16, {.state_dtype = DType::bf16, .kahan_summation = true}), 6u);
  EXPECT_EQ(state_bytes(DType::f32, {.kahan_summation = true}), 8u);  // fp32 needs no buffer
}

TEST(AdamWLowPrecision, Bf16StatesTrackFp32States) {
  Generator gen(5);
  const Tensor start = Tensor::randn({4096}, DType::f32, kCPU, &gen);
  std::vector<Tensor> grads;
  for (int s = 0; s < 10; ++s) grads.push_back(Tensor::randn({4096}, DType::f32, kCPU, &gen));
  const std::vector<float> exact = fp32_trajectory(start, grads, {.lr = 1e-2});
  Tensor p = leaf(start.clone());
  AdamW optimizer({p}, {.lr = 1e-2, .state_dtype = DType::bf16});
  for (const Tensor& g : grads) {
    p.set_grad(g);
    optimizer.step();
  }
  const std::vector<float> got = p.to_float_vector();
  double max_diff = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    max_diff = std::max<double>(max_diff, std::abs(got[i] - exact[i]));
  EXPECT_GT(max_diff, 0.0);   // the states are rounded
  EXPECT_LT(max_diff, 2e-3);  // by a few bf16 ulps of m / sqrt(v) times lr over 10 steps
}

TEST(AdamWLowPrecision, RejectsOtherStateDtypes) {
  Tensor p = leaf(Tensor::zeros({4}));
  EXPECT_THROW(AdamW({p}, {.state_dtype = DType::f16}), NotImplementedError);
}

}  // namespace
}  // namespace headroom
