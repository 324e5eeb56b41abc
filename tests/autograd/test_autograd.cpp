// The autograd engine: accumulation, no-grad, release of saved tensors during backward (through
// allocator statistics), saved-tensor hooks, post-accumulate-grad hooks, and misuse errors.
#include <gtest/gtest.h>

#include <any>
#include <cmath>
#include <string>

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "autograd/saved_tensor.h"
#include "core/generator.h"
#include "core/kernel_census.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/device_memory.h"
#include "ops/ops.h"

namespace headroom {
namespace {

Tensor param(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor t = Tensor::from_floats(values, {n});
  t.set_requires_grad(true);
  return t;
}

TEST(Autograd, GradientsAccumulateAcrossBackwards) {
  Tensor x = param({1.0f, -2.0f, 3.0f});
  backward(sum(mul(x, x)));
  EXPECT_EQ(x.grad().to_float_vector(), (std::vector<float>{2, -4, 6}));
  backward(sum(mul(x, x)));
  EXPECT_EQ(x.grad().to_float_vector(), (std::vector<float>{4, -8, 12}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, GradReturnsGradientsWithoutAccumulatingOrHooks) {
  Tensor x = param({1.0f, -2.0f, 3.0f});
  Tensor w = param({0.5f, 0.25f, 2.0f});
  Tensor unused = param({7.0f});
  int hooks = 0;
  register_post_accumulate_grad_hook(w, [&](const Tensor&) { ++hooks; });
  const Tensor y = sum(mul(mul(x, x), w));
  const std::vector<Tensor> g = grad({y}, {Tensor()}, {w, x, unused});
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].to_float_vector(), (std::vector<float>{1, 4, 9}));    // x^2
  EXPECT_EQ(g[1].to_float_vector(), (std::vector<float>{1, -1, 12}));  // 2 x w
  EXPECT_FALSE(g[2].defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(hooks, 0);
  // Only the asked-for leaves: w's gradient alone, x's AccumulateGrad never runs.
  const Tensor z = sum(mul(x, w));
  EXPECT_EQ(grad({z}, {Tensor()}, {w})[0].to_float_vector(), (std::vector<float>{1, -2, 3}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_THROW(grad({z}, {Tensor()}, {mul(x, w)}), ValueError);  // not a leaf
}

TEST(Autograd, CopiesOfAHandleShareGradientsButViewsDoNot) {
  Tensor x = Tensor::from_floats({1, 2}, {2});
  Tensor copy = x;
  x.set_requires_grad(true);
  EXPECT_TRUE(copy.requires_grad());
  EXPECT_FALSE(x.view({2}).requires_grad());
  EXPECT_FALSE(x.detach().requires_grad());
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = param({1.0f, 2.0f});
  {
    NoGradGuard no_grad;
    Tensor y = mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EnableGradGuard enable;
    EXPECT_TRUE(mul(x, x).requires_grad());
  }
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(Autograd, OnlyLeavesChangeRequiresGrad) {
  Tensor x = param({1.0f});
  Tensor y = mul(x, x);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_THROW(y.set_requires_grad(false), Error);
  EXPECT_THROW(Tensor::from_ints({1}, {1}).set_requires_grad(true), ValueError);
}

// h_k = h_{k-1} * a_k with scalar a_k: each MulBackward frees the saved h_{k-1} (n floats) right
// after it ran, and a_k's hook runs right after its gradient is in: so memory falls step by step.
TEST(Autograd, SavedTensorsAreReleasedAsBackwardProceeds) {
  const int64_t n = 1 << 16;
  const int depth = 6;
  std::vector<Tensor> scales;
  for (int k = 0; k < depth; ++k) scales.push_back(param({1.0f + 0.1f * static_cast<float>(k)}));
  std::vector<int64_t> allocated_at_hook;
  for (const Tensor& a : scales) {
    register_post_accumulate_grad_hook(a, [&](const Tensor&) {
      allocated_at_hook.push_back(static_cast<int64_t>(memory_allocated(kCPU)));
    });
  }
  Tensor loss;
  {
    Tensor x = Tensor::randn({n});
    for (const Tensor& a : scales) x = mul(x, a);
    loss = sum(x);
  }
  backward(loss);
  ASSERT_EQ(allocated_at_hook.size(), static_cast<size_t>(depth));
  const int64_t activation = n * 4;
  for (size_t i = 1; i < allocated_at_hook.size(); ++i) {
    EXPECT_LE(allocated_at_hook[i], allocated_at_hook[i - 1] - activation + 1024)
        << "step " << i << ": a saved activation was not released";
  }
}

TEST(Autograd, SavedTensorHooksPackAndUnpack) {
  Tensor x = param({1.0f, 2.0f, 3.0f});
  Tensor w = param({0.5f, -1.0f, 2.0f});
  int packed = 0, unpacked = 0;
  Tensor loss;
  {
    SavedTensorsHooksGuard hooks(
        [&](const Tensor& t) -> std::any {
          ++packed;
          return t.clone();  // as CPU offload keeps a copy elsewhere
        },
        [&](const std::any& held) -> Tensor {
          ++unpacked;
          return std::any_cast<Tensor>(held);
        });
    loss = sum(mul(x, w));
  }
  EXPECT_EQ(packed, 2);  // MulBackward saved x and w
  EXPECT_EQ(unpacked, 0);
  backward(loss);  // the hooks in force at save time are used, though none is installed now
  EXPECT_EQ(unpacked, 2);
  EXPECT_EQ(x.grad().to_float_vector(), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_EQ(w.grad().to_float_vector(), (std::vector<float>{1.0f, 2.0f, 3.0f}));
}

TEST(Autograd, PostAccumulateGradHookCanApplyTheUpdateAndDropTheGradient) {
  // LOMO's pattern: update in the hook, free the gradient at once.
  Tensor w = param({1.0f, 2.0f});
  const float lr = 0.5f;
  register_post_accumulate_grad_hook(w, [lr](const Tensor& p) {
    NoGradGuard no_grad;
    std::vector<float> value = p.to_float_vector(), grad = p.grad().to_float_vector();
    for (size_t i = 0; i < value.size(); ++i) value[i] -= lr * grad[i];
    p.copy_(Tensor::from_floats(value, p.shape()));
    p.set_grad(Tensor());
  });
  backward(sum(mul(w, w)));
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(w.to_float_vector(), (std::vector<float>{0.0f, 0.0f}));
}

TEST(Autograd, LeafGradientsArriveAsSoonAsTheyAreReady) {
  Tensor w1 = param({2.0f}), w2 = param({3.0f});
  std::vector<std::string> order;
  register_post_accumulate_grad_hook(w1, [&](const Tensor&) { order.push_back("w1"); });
  register_post_accumulate_grad_hook(w2, [&](const Tensor&) { order.push_back("w2"); });
  Tensor x = Tensor::from_floats({1.0f}, {1});
  backward(sum(mul(mul(x, w1), w2)));
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1"}));
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = param({1.0f, 2.0f});
  Tensor loss = sum(mul(x, x));
  backward(loss, Tensor(), /*retain_graph=*/true);
  backward(loss);
  EXPECT_EQ(x.grad().to_float_vector(), (std::vector<float>{4, 8}));
  try {
    backward(loss);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

TEST(Autograd, InPlaceChangeOfASavedTensorIsCaught) {
  Tensor x = param({1.0f, 2.0f});
  Tensor w = Tensor::from_floats({3.0f, 4.0f}, {2});
  Tensor loss = sum(mul(x, w));
  w.fill_(0.0);
  try {
    backward(loss);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MulBackward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
  }
}

TEST(Autograd, SeveralRootsAndExplicitGradients) {
  Tensor x = param({1.0f, 2.0f});
  Tensor a = mul(x, x), b = scale(x, 3.0);
  backward({a, b}, {Tensor::from_floats({1, 1}, {2}), Tensor::from_floats({2, 0}, {2})});
  EXPECT_EQ(x.grad().to_float_vector(), (std::vector<float>{8, 4}));
  EXPECT_THROW(backward(mul(x, x)), Error);  // not a scalar and no gradient given
}

TEST(Autograd, UnusedSplitPiecesGetZeroGradient) {
  Tensor x = param({1, 2, 3, 4});
  std::vector<Tensor> parts = split(x, {1, 3}, 0);
  backward(sum(parts[1]));
  EXPECT_EQ(x.grad().to_float_vector(), (std::vector<float>{0, 1, 1, 1}));
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

// Note [Partial gradients]: an input read by three linears (q, k and v of one norm's output)
// gets its gradient summed by the GEMMs themselves: no accumulation is launched, and the sum is
// x's three products.
TEST(Autograd, ALinearAddsItsInputGradientIntoTheSumSoFar) {
  Generator generator(3);
  auto randn = [&](const Shape& shape) {
    return Tensor::randn(shape, DType::f32, kCPU, &generator);
  };
  Tensor x = randn({32, 16}).set_requires_grad(true);
  const std::vector<Tensor> w = {randn({16, 16}), randn({8, 16}), randn({8, 16})};
  const std::vector<Tensor> g = {randn({32, 16}), randn({32, 8}), randn({32, 8})};
  const Tensor h = scale(x, 1.0);  // a non-leaf, as a norm's output
  std::vector<Tensor> outs;
  for (const Tensor& wi : w) outs.push_back(linear(h, wi));
  KernelCensus census;
  {
    KernelCensusScope scope(census);
    backward(outs, g);
  }
  int accumulates = 0;
  for (const KernelLaunch& l : census.launches()) {
    accumulates += std::string(l.entry) == "accumulate" ? 1 : 0;
  }
  EXPECT_EQ(accumulates, 0);
  Tensor expected = matmul(g[0], w[0]);
  for (size_t i = 1; i < w.size(); ++i) expected = add(expected, matmul(g[i], w[i]));
  const std::vector<float> got = x.grad().to_float_vector(), want = expected.to_float_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    // Not bit for bit: the GEMMs accumulate into the running sum (beta 1), where the reference
    // rounds each product before adding; both are f32 sums of three 16-term products.
    EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
  }
}

}  // namespace
}  // namespace headroom
