// Adafactor against HF's transformers.optimization.Adafactor (its step() transcribed in torch by
// tools/gen_optim_golden.py; tests/fixtures/optim/adafactor_golden.txt), its state_dict, its
// factored state's memory to the byte, and HF's option checks.
#include <gtest/gtest.h>

#include <memory>

#include "backend/adafactor_kernels.h"
#include "core/error.h"
#include "memory/device_memory.h"
#include "optim/adafactor.h"
#include "optim/optim_golden.h"

namespace headroom {
namespace {

using optim_test::OptimGolden;

optim_test::MakeOptimizer adafactor_case(const OptimGolden& golden, const std::string& name) {
  const AdafactorOptions options{.lr = golden.number(name, "lr"),
                                 .eps1 = *golden.number(name, "eps1"),
                                 .eps2 = *golden.number(name, "eps2"),
                                 .clip_threshold = *golden.number(name, "clip_threshold"),
                                 .decay_rate = *golden.number(name, "decay_rate"),
                                 .beta1 = golden.number(name, "beta1"),
                                 .weight_decay = *golden.number(name, "weight_decay"),
                                 .scale_parameter = golden.flag(name, "scale_parameter"),
                                 .relative_step = golden.flag(name, "relative_step"),
                                 .warmup_init = golden.flag(name, "warmup_init")};
  return [options](const std::vector<NamedTensor>& params) {
    return std::make_unique<Adafactor>(params, options);
  };
}

// Elementwise the operations are torch's, fused where its AVX2 kernels fuse; the reductions
// (row and column means, the RMS of the parameter and of the update) sum in another order than
// torch's vectorised ones, a few ulp apart, and that difference passes through rsqrt and the
// step size into the parameters over 10 steps: 2e-6 relative (about 16 ulp) bounds it.
TEST(Adafactor, MatchesHfGolden) {
  const OptimGolden golden = optim_test::read_optim_golden("adafactor_golden.txt");
  for (const std::string name : {"hf_defaults", "trainer", "beta1_warmup"}) {
    optim_test::expect_golden_trajectory(golden, name, adafactor_case(golden, name), 2e-6, 1e-7);
  }
}

TEST(Adafactor, StateDictRoundTripIsBitExact) {
  const OptimGolden golden = optim_test::read_optim_golden("adafactor_golden.txt");
  optim_test::expect_state_dict_round_trip(golden, adafactor_case(golden, "beta1_warmup"));
  optim_test::expect_state_dict_round_trip(golden, adafactor_case(golden, "hf_defaults"));
}

TEST(Adafactor, DefaultsAreHfs) {
  const AdafactorOptions o;
  EXPECT_FALSE(o.lr.has_value());
  EXPECT_EQ(o.eps1, 1e-30);
  EXPECT_EQ(o.eps2, 1e-3);
  EXPECT_EQ(o.clip_threshold, 1.0);
  EXPECT_EQ(o.decay_rate, -0.8);
  EXPECT_FALSE(o.beta1.has_value());
  EXPECT_EQ(o.weight_decay, 0.0);
  EXPECT_TRUE(o.scale_parameter);
  EXPECT_TRUE(o.relative_step);
  EXPECT_FALSE(o.warmup_init);
}

// Bytes the caching allocator books for a parameter's scalars workspace, which stays alive as
// AdafactorState::rms_lr until the parameter's next step (Note [Adafactor step]).
size_t scalars_bytes(int64_t batch) {
  return static_cast<size_t>((adafactor_scalars(batch) * 8 + 511) / 512 * 512);
}

// A [256, 1024] matrix keeps 256 + 1024 floats, not 256 * 1024; vectors keep one per element.
// Each parameter also keeps its scalars workspace (RMS and lr_t), 4.5 KiB.
TEST(Adafactor, FactoredStateIsRowsPlusColumns) {
  struct Case {
    Shape shape;
    size_t state_bytes;
  };
  const std::vector<Case> cases = {
      {{256, 1024}, 1024 + 4096 + scalars_bytes(1)},  // row [256], col [1024]
      {{2, 3, 4}, 512 + 512 + scalars_bytes(2)},      // row [2, 3], col [2, 4]
      {{1000}, 4096 + scalars_bytes(1)},              // exp_avg_sq [1000]
      {{7}, 512 + scalars_bytes(1)}};
  std::vector<Tensor> params;
  size_t expected = 0;
  for (const Case& c : cases) {
    params.push_back(Tensor::randn(c.shape).set_requires_grad(true));
    params.back().set_grad(Tensor::randn(c.shape));
    expected += c.state_bytes;
  }
  Adafactor optimizer(params);
  reset_peak_memory_stats(kCPU);
  const size_t before = memory_allocated(kCPU);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kCPU) - before, expected);
  // During the first step only rsqrt of one matrix's column statistics is added (4096 B at
  // most); later steps also hold a parameter's new scalars before its old ones go.
  EXPECT_LE(max_memory_allocated(kCPU) - before, expected + 4096);
  reset_peak_memory_stats(kCPU);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kCPU) - before, expected);
  EXPECT_LE(max_memory_allocated(kCPU) - before, expected + 4096 + scalars_bytes(1));
  const double per_element = static_cast<double>(1024 + 4096) / (256.0 * 1024.0);
  EXPECT_LT(per_element, 0.02);  // bytes of state per element of the matrix
  EXPECT_EQ(optimizer.state(0, 0).exp_avg_sq_row.shape(), (Shape{256}));
  EXPECT_EQ(optimizer.state(0, 0).exp_avg_sq_col.shape(), (Shape{1024}));
  EXPECT_FALSE(optimizer.state(0, 0).exp_avg_sq.defined());
  EXPECT_EQ(optimizer.state(0, 1).exp_avg_sq_col.shape(), (Shape{2, 4}));
}

TEST(Adafactor, Beta1AddsFourBytesPerElement) {
  Tensor p = Tensor::randn({64, 32}).set_requires_grad(true);
  p.set_grad(Tensor::randn({64, 32}));
  Adafactor optimizer({p}, {.beta1 = 0.9});
  const size_t before = memory_allocated(kCPU);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kCPU) - before, 512u + 512u + 64u * 32u * 4u + scalars_bytes(1));
}

TEST(Adafactor, DryRunOnMetaAllocatesWhatTheCpuDoes) {
  for (const Device device : {kCPU, kMeta}) {
    Tensor param = Tensor::zeros({256, 1024}, DType::f32, device).set_requires_grad(true);
    param.set_grad(Tensor::zeros({256, 1024}, DType::f32, device));
    Adafactor optimizer({param});
    reset_peak_memory_stats(device);
    const size_t before = memory_allocated(device);
    optimizer.step();
    EXPECT_EQ(memory_allocated(device) - before, 1024u + 4096u + scalars_bytes(1)) << device;
    EXPECT_EQ(max_memory_allocated(device) - before, 1024u + 2 * 4096u + scalars_bytes(1))
        << device;
    EXPECT_EQ(optimizer.state(0, 0).step, 1);
  }
}

TEST(Adafactor, Bf16ParametersUpdateInPlaceAsTheFp32StepRoundedOnce) {
  Tensor p = Tensor::randn({8, 4}).to(DType::bf16).set_requires_grad(true);
  Tensor p32 = p.to(DType::f32).set_requires_grad(true);
  const Tensor grad = Tensor::randn({8, 4});
  p.set_grad(grad.to(DType::bf16));
  p32.set_grad(grad.to(DType::bf16).to(DType::f32));
  Adafactor low({p}, {.lr = 0.01, .relative_step = false});
  Adafactor reference({p32}, {.lr = 0.01, .relative_step = false});
  low.step();
  reference.step();
  EXPECT_EQ(p.dtype(), DType::bf16);
  EXPECT_EQ(p.to_float_vector(), p32.to(DType::bf16).to_float_vector());
}

TEST(Adafactor, RejectsWhatHfRejects) {
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  try {
    Adafactor optimizer({p}, {.lr = 1e-3});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Cannot combine manual `lr` and `relative_step=True`"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Adafactor({p}, {.relative_step = false, .warmup_init = true}), ValueError);
  EXPECT_THROW(Adafactor({p}, {.relative_step = false}), ValueError);  // no lr at all
  EXPECT_THROW(Adafactor({p}, {.clip_threshold = 0.0}), ValueError);
  EXPECT_THROW(Adafactor({p}, {.decay_rate = 0.5}), ValueError);
  EXPECT_THROW(Adafactor({p}, {.beta1 = 1.0}), ValueError);
  EXPECT_THROW(Adafactor({p}, {.weight_decay = -1.0}), ValueError);
}

}  // namespace
}  // namespace headroom
