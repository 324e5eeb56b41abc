// SGD against torch.optim.SGD (tests/fixtures/optim/sgd_golden.txt), its state_dict, its momentum
// buffer's memory to the byte, and torch's option checks.
#include <gtest/gtest.h>

#include <memory>

#include "core/error.h"
#include "memory/device_memory.h"
#include "optim/optim_golden.h"
#include "optim/sgd.h"

namespace headroom {
namespace {

using optim_test::OptimGolden;

optim_test::MakeOptimizer sgd_case(const OptimGolden& golden, const std::string& name) {
  const SGDOptions options{.lr = *golden.number(name, "lr"),
                           .momentum = *golden.number(name, "momentum"),
                           .dampening = *golden.number(name, "dampening"),
                           .weight_decay = *golden.number(name, "weight_decay"),
                           .nesterov = golden.flag(name, "nesterov")};
  return [options](const std::vector<NamedTensor>& params) {
    return std::make_unique<SGD>(params, options);
  };
}

// Same fp32 operations as torch's AVX2 kernels, fused where they fuse: the values agree to the
// last bit in practice; 1e-6 relative leaves room for a torch built without FMA.
TEST(SGD, MatchesTorchGolden) {
  const OptimGolden golden = optim_test::read_optim_golden("sgd_golden.txt");
  for (const std::string name : {"plain", "momentum", "nesterov"}) {
    optim_test::expect_golden_trajectory(golden, name, sgd_case(golden, name), 1e-6, 0.0);
  }
}

TEST(SGD, StateDictRoundTripIsBitExact) {
  const OptimGolden golden = optim_test::read_optim_golden("sgd_golden.txt");
  optim_test::expect_state_dict_round_trip(golden, sgd_case(golden, "nesterov"));
  optim_test::expect_state_dict_round_trip(golden, sgd_case(golden, "plain"));
}

TEST(SGD, MomentumBufferIsFourBytesPerElementAndPlainSgdKeepsNothing) {
  const std::vector<Shape> shapes = {{300, 5}, {1000}, {7}};
  for (const double momentum : {0.9, 0.0}) {
    std::vector<Tensor> params;
    size_t expected = 0;
    for (const Shape& shape : shapes) {
      params.push_back(Tensor::zeros(shape).set_requires_grad(true));
      params.back().set_grad(Tensor::ones(shape));
      if (momentum != 0.0) expected += optim_test::round_to_block(4 * shape.numel());
    }
    SGD optimizer(params, {.lr = 0.1, .momentum = momentum});
    const size_t before = memory_allocated(kCPU);
    optimizer.step();
    EXPECT_EQ(memory_allocated(kCPU) - before, expected) << "momentum " << momentum;
    optimizer.step();
    EXPECT_EQ(memory_allocated(kCPU) - before, expected) << "momentum " << momentum;
  }
}

TEST(SGD, FirstStepBufferIsTheDecayedGradientAsTorch) {
  Tensor p = Tensor::from_floats({1.0f, -2.0f}, {2}).set_requires_grad(true);
  p.set_grad(Tensor::from_floats({0.5f, 0.25f}, {2}));
  SGD optimizer({p}, {.lr = 1.0, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.5});
  optimizer.step();  // d = g + 0.5 p = {1, -0.75}; no dampening at the first step
  EXPECT_EQ(optimizer.state(0, 0).momentum_buffer.to_float_vector(),
            (std::vector<float>{1.0f, -0.75f}));
  EXPECT_EQ(p.to_float_vector(), (std::vector<float>{0.0f, -1.25f}));
}

TEST(SGD, DryRunOnMetaAllocatesTheStateAndComputesNothing) {
  Tensor param = Tensor::empty({256, 1024}, DType::f32, kMeta).set_requires_grad(true);
  param.set_grad(Tensor::empty({256, 1024}, DType::f32, kMeta));
  SGD optimizer({param}, {.momentum = 0.9});
  const size_t before = memory_allocated(kMeta);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kMeta) - before, 256u * 1024 * 4);
}

TEST(SGD, Bf16ParametersUpdateInFp32) {
  Tensor p = Tensor::from_floats({1.0f, 2.0f}, {2}).to(DType::bf16).set_requires_grad(true);
  p.set_grad(Tensor::from_floats({1.0f, -1.0f}, {2}).to(DType::bf16));
  SGD optimizer({p}, {.lr = 0.5});
  optimizer.step();
  EXPECT_EQ(p.dtype(), DType::bf16);
  EXPECT_EQ(p.to_float_vector(), (std::vector<float>{0.5f, 2.5f}));
}

TEST(SGD, RejectsWhatTorchRejects) {
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  EXPECT_THROW(SGD({p}, {.lr = -1.0}), ValueError);
  EXPECT_THROW(SGD({p}, {.momentum = -0.1}), ValueError);
  EXPECT_THROW(SGD({p}, {.weight_decay = -0.1}), ValueError);
  EXPECT_THROW(SGD({p}, {.nesterov = true}), ValueError);
  EXPECT_THROW(SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}), ValueError);
  EXPECT_THROW(SGD(std::vector<Tensor>{p, p}), ValueError);
  EXPECT_THROW(SGD({Tensor::zeros({2}, DType::i32)}), NotImplementedError);
}

}  // namespace
}  // namespace headroom
