// linear_add (ops/linear.h) beyond the op harness: a base handed over is written in place with no
// allocation, a base held elsewhere is left as it was, and both equal add(base, scale(linear))
// to the GEMM's single rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "autograd/engine.h"
#include "core/generator.h"
#include "memory/device_memory.h"
#include "ops/ops.h"

namespace headroom {
namespace {

Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Generator generator(seed);
  Tensor t = Tensor::randn(shape, DType::f32, kCPU, &generator);
  return scale == 1.0 ? t : headroom::scale(t, scale);
}

// Within f32 rounding, not bit for bit: linear_add's GEMM rounds alpha * x W^T + base once, the
// separate ops round the product, its scaling and the sum.
void expect_close(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_float_vector(), y = b.to_float_vector();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i], y[i], 1e-5f * (1.0f + std::fabs(y[i]))) << "element " << i;
  }
}

TEST(LinearAdd, AHandedOverBaseIsWrittenInPlace) {
  const Tensor x = randn({16, 8}, 1), w = randn({12, 8}, 2, 0.3);
  const Tensor h = randn({16, 4}, 3), b = randn({12, 4}, 4, 0.3);
  const Tensor expected = add(linear(x, w), scale(linear(h, b), 2.0));
  Tensor base = linear(x, w);
  const void* buffer = base.data_ptr();
  const size_t before = memory_allocated(kCPU);
  const Tensor out = linear_add(std::move(base), h, b, 2.0);
  EXPECT_EQ(memory_allocated(kCPU), before);
  EXPECT_EQ(out.data_ptr(), buffer);
  expect_close(out, expected);
}

TEST(LinearAdd, ABaseHeldElsewhereIsLeftAsItWas) {
  const Tensor h = randn({16, 4}, 3), b = randn({12, 4}, 4, 0.3);
  const Tensor base = randn({16, 12}, 5);
  const std::vector<float> values = base.to_float_vector();
  const Tensor out = linear_add(base, h, b, 0.5);
  EXPECT_NE(out.data_ptr(), base.data_ptr());
  EXPECT_EQ(base.to_float_vector(), values);
  expect_close(out, add(base, scale(linear(h, b), 0.5)));
}

// The gradients are the separate ops': g to base, alpha g B to h, alpha g^T h to B.
TEST(LinearAdd, GradientsEqualTheSeparateOps) {
  auto run = [](bool fused) {
    Tensor x = randn({16, 8}, 1).set_requires_grad(true);
    Tensor w = randn({12, 8}, 2, 0.3).set_requires_grad(true);
    Tensor a = randn({4, 8}, 3, 0.3).set_requires_grad(true);
    Tensor b = randn({12, 4}, 4, 0.3).set_requires_grad(true);
    const Tensor h = linear(x, a);
    const Tensor out =
        fused ? linear_add(linear(x, w), h, b, 2.0) : add(linear(x, w), scale(linear(h, b), 2.0));
    backward(out, randn({16, 12}, 6));
    return std::vector<Tensor>{x.grad(), w.grad(), a.grad(), b.grad()};
  };
  const std::vector<Tensor> fused = run(true), separate = run(false);
  for (size_t i = 0; i < fused.size(); ++i) {
    SCOPED_TRACE(i);
    expect_close(fused[i], separate[i]);
  }
}

}  // namespace
}  // namespace headroom
