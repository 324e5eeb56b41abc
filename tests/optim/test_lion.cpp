// Lion against lion_pytorch's update rule (tests/fixtures/optim/lion_golden.txt), its
// state_dict, its state's memory to the byte, and its option checks.
#include <gtest/gtest.h>

#include <memory>

#include "core/error.h"
#include "memory/device_memory.h"
#include "optim/lion.h"
#include "optim/optim_golden.h"

namespace headroom {
namespace {

using optim_test::OptimGolden;

optim_test::MakeOptimizer lion_case(const OptimGolden& golden, const std::string& name) {
  const LionOptions options{.lr = *golden.number(name, "lr"),
                            .beta1 = *golden.number(name, "beta1"),
                            .beta2 = *golden.number(name, "beta2"),
                            .weight_decay = *golden.number(name, "weight_decay")};
  return [options](const std::vector<NamedTensor>& params) {
    return std::make_unique<Lion>(params, options);
  };
}

// The same float operations in the same order as the NumPy reference (no fused multiply-adds),
// so the trajectory is bit-identical; the tolerance is 0.
TEST(Lion, MatchesReferenceGolden) {
  const OptimGolden golden = optim_test::read_optim_golden("lion_golden.txt");
  for (const std::string name : {"default", "decay"}) {
    optim_test::expect_golden_trajectory(golden, name, lion_case(golden, name), 0.0, 0.0);
  }
}

TEST(Lion, StateDictRoundTripIsBitExact) {
  const OptimGolden golden = optim_test::read_optim_golden("lion_golden.txt");
  optim_test::expect_state_dict_round_trip(golden, lion_case(golden, "decay"));
}

TEST(Lion, DefaultsAreLionPytorchs) {
  const LionOptions o;
  EXPECT_EQ(o.lr, 1e-4);
  EXPECT_EQ(o.beta1, 0.9);
  EXPECT_EQ(o.beta2, 0.99);
  EXPECT_EQ(o.weight_decay, 0.0);
}

TEST(Lion, StateIsFourBytesPerElement) {
  const std::vector<Shape> shapes = {{300, 5}, {1000}, {129}, {7}};
  std::vector<Tensor> params;
  size_t expected = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(Tensor::zeros(shapes[i]).set_requires_grad(true));
    if (i + 1 == shapes.size()) continue;  // no gradient: no state
    params.back().set_grad(Tensor::ones(shapes[i]));
    expected += optim_test::round_to_block(4 * shapes[i].numel());
  }
  ASSERT_EQ(expected, 6144u + 4096u + 1024u);
  Lion optimizer(params);
  const size_t before = memory_allocated(kCPU);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kCPU) - before, expected);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kCPU) - before, expected);
  EXPECT_FALSE(optimizer.state(0, 3).exp_avg.defined());
}

TEST(Lion, EveryElementMovesByLr) {
  Tensor p = Tensor::from_floats({1.0f, -2.0f, 0.5f}, {3}).set_requires_grad(true);
  p.set_grad(Tensor::from_floats({3.0f, -1e-3f, 0.0f}, {3}));
  Lion optimizer({p}, {.lr = 0.125});
  optimizer.step();
  EXPECT_EQ(p.to_float_vector(), (std::vector<float>{0.875f, -1.875f, 0.5f}));
}

TEST(Lion, DryRunOnMetaAllocatesTheStateAndComputesNothing) {
  Tensor param = Tensor::empty({256, 1024}, DType::f32, kMeta).set_requires_grad(true);
  param.set_grad(Tensor::empty({256, 1024}, DType::f32, kMeta));
  Lion optimizer({param});
  const size_t before = memory_allocated(kMeta);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kMeta) - before, 256u * 1024 * 4);
}

TEST(Lion, Bf16ParametersKeepAnF32State) {
  Tensor p = Tensor::from_floats({1.0f, 2.0f}, {2}).to(DType::bf16).set_requires_grad(true);
  p.set_grad(Tensor::from_floats({1.0f, -1.0f}, {2}).to(DType::bf16));
  Lion optimizer({p}, {.lr = 0.5});
  optimizer.step();
  EXPECT_EQ(p.dtype(), DType::bf16);
  EXPECT_EQ(p.to_float_vector(), (std::vector<float>{0.5f, 2.5f}));
  EXPECT_EQ(optimizer.state(0, 0).exp_avg.dtype(), DType::f32);
}

TEST(Lion, RejectsOptionsOutOfRange) {
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  EXPECT_THROW(Lion({p}, {.lr = -1.0}), ValueError);
  EXPECT_THROW(Lion({p}, {.beta1 = 1.0}), ValueError);
  EXPECT_THROW(Lion({p}, {.beta2 = -0.5}), ValueError);
  EXPECT_THROW(Lion({p}, {.weight_decay = -1.0}), ValueError);
}

}  // namespace
}  // namespace headroom
