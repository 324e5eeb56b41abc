// Lion8bit beside Lion, its state bytes through allocator statistics, its state_dict, thread
// count and factory name; and where the 8-bit optimizers round a 16-bit parameter (Note
// [bitsandbytes 16-bit parameters]). Its trajectories against bitsandbytes are in
// test_bnb8_16bit_golden.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "memory/device_memory.h"
#include "optim/adamw_8bit.h"
#include "optim/lion.h"
#include "optim/lion_8bit.h"
#include "optim/optimizer_factory.h"

namespace headroom {
namespace {

// Below min_8bit_size the momentum stays fp32 and bitsandbytes' kOptimizer32bit1State is Lion's
// rule with lion_pytorch's float operations: the parameters of the golden-tested Lion, bit for
// bit. The momentum differs in its last bits only, since Lion rounds 1 - beta from double and
// bitsandbytes computes it in fp32 (1 - 0.99f).
TEST(Lion8bit, SmallTensorsFollowLionBitForBit) {
  const Shape shape{1000};
  const Tensor init = Tensor::randn(shape);
  Tensor a = init.clone().set_requires_grad(true), b = init.clone().set_requires_grad(true);
  Lion8bit eight_bit({a}, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99});
  Lion lion({b}, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99});
  for (int step = 0; step < 4; ++step) {
    const Tensor grad = Tensor::randn(shape);
    a.set_grad(grad);
    b.set_grad(grad.clone());
    eight_bit.step();
    lion.step();
  }
  EXPECT_EQ(a.to_float_vector(), b.to_float_vector());
  const std::vector<float> m = eight_bit.state(0, 0).state1.to_float_vector();
  const std::vector<float> lion_m = lion.state(0, 0).exp_avg.to_float_vector();
  float largest = 0.0f;
  for (float v : lion_m) largest = std::fmax(largest, std::fabs(v));
  for (size_t i = 0; i < m.size(); ++i) ASSERT_NEAR(m[i], lion_m[i], 1e-6f * largest);
  EXPECT_FALSE(eight_bit.state(0, 0).absmax1.defined());
}

size_t round_to_block(size_t bytes) { return (bytes + 511) / 512 * 512; }

// Bytes of state that the first step of a Lion8bit over `param` allocates.
size_t lion_8bit_state_bytes(const Shape& shape, DType dtype) {
  Tensor param = Tensor::zeros(shape, dtype).set_requires_grad(true);
  param.set_grad(Tensor::ones(shape, dtype));
  Lion8bit optimizer({param});
  const size_t before = memory_allocated(kCPU);
  optimizer.step();
  const size_t after_first = memory_allocated(kCPU);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kCPU), after_first) << "the update itself allocates nothing";
  return after_first - before;
}

TEST(Lion8bit, StateBytesPerParameter) {
  const size_t n = size_t{1} << 20;
  // lion_8bit: 1 B/param and an fp32 absmax per 256 elements, whatever the parameter's dtype.
  EXPECT_EQ(lion_8bit_state_bytes({static_cast<int64_t>(n)}, DType::f32), n + 4u * (n / 256));
  EXPECT_EQ(lion_8bit_state_bytes({1024, 1024}, DType::bf16), n + 4u * (n / 256));
  EXPECT_EQ(lion_8bit_state_bytes({4096}, DType::f16), 4096u + 512u);
  EXPECT_EQ(lion_8bit_state_bytes({4095}, DType::bf16), round_to_block(4u * 4095));
}

TEST(Lion8bit, DryRunOnMetaAllocatesTheStateAndComputesNothing) {
  Tensor param = Tensor::empty({4096, 1024}, DType::bf16, kMeta).set_requires_grad(true);
  param.set_grad(Tensor::empty({4096, 1024}, DType::bf16, kMeta));
  Lion8bit optimizer({param});
  const size_t before = memory_allocated(kMeta);
  optimizer.step();
  const size_t n = 4096u * 1024u;
  EXPECT_EQ(memory_allocated(kMeta) - before, n + 4u * (n / 256));
  EXPECT_EQ(optimizer.state(0, 0).state1.dtype(), DType::u8);
}

TEST(Lion8bit, StateDictRoundTripContinuesTheSameTrajectory) {
  const Shape shape{5000};
  const Tensor init = Tensor::randn(shape).to(DType::bf16);
  const Tensor small_init = Tensor::randn({300}).to(DType::bf16);
  Tensor a = init.clone().set_requires_grad(true);
  Tensor sa = small_init.clone().set_requires_grad(true);
  const Lion8bitOptions options{.lr = 1e-2, .weight_decay = 0.1};
  Lion8bit first({a, sa}, options);
  std::vector<Tensor> grads;
  for (int step = 0; step < 4; ++step) {
    grads.push_back(Tensor::randn(shape).to(DType::bf16));
    grads.push_back(Tensor::randn({300}).to(DType::bf16));
  }
  for (int step = 0; step < 2; ++step) {
    a.set_grad(grads[2 * step]);
    sa.set_grad(grads[2 * step + 1]);
    first.step();
  }
  // The second optimizer's parameters: the first's values after two steps (bf16, exactly).
  Tensor b =
      Tensor::from_floats(a.to_float_vector(), shape).to(DType::bf16).set_requires_grad(true);
  Tensor sb =
      Tensor::from_floats(sa.to_float_vector(), {300}).to(DType::bf16).set_requires_grad(true);
  Lion8bit second({b, sb}, options);
  second.load_state_dict(first.state_dict());
  EXPECT_EQ(second.state(0, 0).step, 2);
  for (int step = 2; step < 4; ++step) {
    a.set_grad(grads[2 * step]);
    sa.set_grad(grads[2 * step + 1]);
    b.set_grad(grads[2 * step]);
    sb.set_grad(grads[2 * step + 1]);
    first.step();
    second.step();
  }
  EXPECT_EQ(a.to_float_vector(), b.to_float_vector());
  EXPECT_EQ(sa.to_float_vector(), sb.to_float_vector());
}

TEST(Lion8bit, ThreadCountDoesNotChangeResults) {
  const Shape shape{3 * (1 << 16) + 77};  // enough blocks for several threads, a short last one
  const Tensor init = Tensor::randn(shape).to(DType::bf16);
  const Tensor grad = Tensor::randn(shape).to(DType::bf16);
  std::vector<std::vector<float>> results;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 4}) {
    omp_set_num_threads(threads);
    Tensor p = init.clone().set_requires_grad(true);
    Lion8bit optimizer({p}, {.lr = 1e-3, .weight_decay = 0.1});
    for (int step = 0; step < 3; ++step) {
      p.set_grad(grad);
      optimizer.step();
    }
    results.push_back(p.to_float_vector());
    results.push_back(optimizer.state(0, 0).absmax1.to_float_vector());
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(results[0], results[2]);
  EXPECT_EQ(results[1], results[3]);
}

TEST(Lion8bit, RejectsBadOptionsAndParameters) {
  Tensor p = Tensor::zeros({4}).set_requires_grad(true);
  EXPECT_THROW(Lion8bit({p}, {.lr = -1.0}), ValueError);
  EXPECT_THROW(Lion8bit({p}, {.beta1 = 1.0}), ValueError);
  EXPECT_THROW(Lion8bit({p}, {.beta2 = -0.1}), ValueError);
  EXPECT_THROW(Lion8bit({p}, {.weight_decay = -0.1}), ValueError);
  EXPECT_THROW(Lion8bit({p}, {.min_8bit_size = -1}), ValueError);
  EXPECT_THROW(Lion8bit(std::vector<Tensor>{p, p}), ValueError);
  EXPECT_THROW(Lion8bit({Tensor::zeros({4}, DType::f8_e5m2).set_requires_grad(true)}),
               NotImplementedError);
}

TEST(Lion8bit, FactoryNameIsHfs) {
  const std::vector<NamedTensor> named = {{"w", Tensor::zeros({64, 64}).set_requires_grad(true)},
                                          {"b", Tensor::zeros({64}).set_requires_grad(true)}};
  OptimizerArguments args;
  args.optim = "lion_8bit";
  args.learning_rate = 3e-5;
  args.adam_beta2 = 0.98;
  args.weight_decay = 0.1;
  const auto optimizer = make_optimizer(args, named);
  EXPECT_EQ(optimizer->name(), "lion_8bit");
  const auto& lion = dynamic_cast<const Lion8bit&>(*optimizer);
  EXPECT_EQ(lion.options().beta2, 0.98);  // HF passes (adam_beta1, adam_beta2) as Lion's betas
  EXPECT_EQ(*optimizer->param_groups()[0].weight_decay, 0.1);
  EXPECT_EQ(*optimizer->param_groups()[1].weight_decay, 0.0);
  EXPECT_EQ(optimizer->lr(), 3e-5);
  const std::vector<std::string> names = optimizer_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "lion_8bit"), names.end());
}

// A bf16 parameter of 1 under lr 0.0015 and weight decay 1: the step and the decay each move it
// by 0.0015, less than half the spacing of bf16 below 1 (2^-9), so bitsandbytes' kernels, which
// round after each (Note [bitsandbytes 16-bit parameters]), leave it at 1; one rounding at the end
// of 1 - 0.003 would give 1 - 2^-8. An f32 parameter moves.
template <typename MakeOptimizer>
void expect_rounded_after_each_part(MakeOptimizer make) {
  for (const int64_t n : {int64_t{64}, int64_t{4096}}) {  // fp32 states, then 8-bit ones
    for (const DType dtype : {DType::bf16, DType::f32}) {
      Tensor p = Tensor::ones({n}, dtype).set_requires_grad(true);
      p.set_grad(Tensor::ones({n}, dtype));
      std::unique_ptr<Optimizer> optimizer = make(p);
      optimizer->step();
      const std::vector<float> values = p.to_float_vector();
      for (float v : values) {
        if (dtype == DType::bf16) {
          ASSERT_EQ(v, 1.0f) << optimizer->name() << ", " << n << " elements";
        } else {
          ASSERT_NEAR(v, 0.997f, 1e-5f) << optimizer->name() << ", " << n << " elements";
        }
      }
    }
  }
}

TEST(Bnb16BitParameters, AdamW8bitRoundsAfterTheStepAndAfterTheDecay) {
  expect_rounded_after_each_part([](const Tensor& p) -> std::unique_ptr<Optimizer> {
    return std::make_unique<AdamW8bit>(std::vector<Tensor>{p},
                                       AdamW8bitOptions{.lr = 0.0015, .weight_decay = 1.0});
  });
}

TEST(Bnb16BitParameters, Lion8bitRoundsAfterTheDecayAndAfterTheStep) {
  expect_rounded_after_each_part([](const Tensor& p) -> std::unique_ptr<Optimizer> {
    return std::make_unique<Lion8bit>(std::vector<Tensor>{p},
                                      Lion8bitOptions{.lr = 0.0015, .weight_decay = 1.0});
  });
}

}  // namespace
}  // namespace headroom
