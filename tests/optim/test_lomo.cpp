// LOMO: the fused update against OpenLMLab/LOMO's rule (tests/fixtures/optim/lomo_golden.txt)
// through real backward passes, the two-pass norm, and its memory: no state, and no gradient
// alive after backward, asserted through allocator statistics on a small GPT-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "core/error.h"
#include "memory/device_memory.h"
#include "nn/causal_lm.h"
#include "nn/tiny_text.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lomo.h"
#include "optim/optim_golden.h"
#include "optim/sgd.h"

namespace headroom {
namespace {

using optim_test::OptimGolden;

optim_test::MakeOptimizer lomo_case(const OptimGolden& golden, const std::string& name) {
  const LomoOptions options{.lr = *golden.number(name, "lr"),
                            .weight_decay = *golden.number(name, "weight_decay"),
                            .clip_grad_norm = golden.number(name, "clip_grad_norm"),
                            .clip_grad_value = golden.number(name, "clip_grad_value")};
  return [options](const std::vector<NamedTensor>& params) {
    return std::make_unique<Lomo>(params, options);
  };
}

// The gradients arrive through backward: loss = sum_p sum(p * G_p) has d loss / d p = G_p
// exactly. See Note [LOMO backward passes].
void lomo_backward_step(Optimizer& optimizer, const std::vector<NamedTensor>& params,
                        const OptimGolden& golden, int step) {
  Tensor loss;
  for (const auto& [name, param] : params) {
    const Tensor term =
        sum(mul(param, Tensor::from_floats(golden.grads.at({step, name}), param.shape())));
    loss = loss.defined() ? add(loss, term) : term;
  }
  ASSERT_TRUE(optimizer.updates_in_backward());
  const int passes = optimizer.backward_passes();
  for (int pass = 0; pass < passes; ++pass) {
    optimizer.begin_backward_pass(pass);
    backward(loss, Tensor(), /*retain_graph=*/pass + 1 < passes);
    for (const auto& [name, param] : params) {
      EXPECT_FALSE(param.grad().defined()) << name << " kept its gradient after pass " << pass;
    }
  }
  optimizer.step();
}

// The same float operations in the same order as the NumPy reference; the global norm is summed
// in double as NumPy's float64 is, so the values are bit-identical and the tolerance is 0.
TEST(Lomo, MatchesReferenceGoldenThroughBackward) {
  const OptimGolden golden = optim_test::read_optim_golden("lomo_golden.txt");
  for (const std::string name : {"plain", "value_decay", "norm"}) {
    optim_test::expect_golden_trajectory(golden, name, lomo_case(golden, name), 0.0, 0.0,
                                         lomo_backward_step);
  }
}

TEST(Lomo, StepAppliesGradientsSetByHand) {
  const OptimGolden golden = optim_test::read_optim_golden("lomo_golden.txt");
  optim_test::expect_golden_trajectory(golden, "value_decay", lomo_case(golden, "value_decay"), 0.0,
                                       0.0);
}

TEST(Lomo, StateDictRoundTripIsBitExact) {
  const OptimGolden golden = optim_test::read_optim_golden("lomo_golden.txt");
  optim_test::expect_state_dict_round_trip(golden, lomo_case(golden, "norm"), lomo_backward_step);
  const Lomo lomo({Tensor::zeros({3}).set_requires_grad(true)});
  EXPECT_TRUE(lomo.state_dict().tensors.empty());
}

TEST(Lomo, PassesFollowClipGradNorm) {
  Tensor p = Tensor::zeros({3}).set_requires_grad(true);
  Lomo plain({p});
  EXPECT_EQ(plain.backward_passes(), 1);
  EXPECT_THROW(plain.begin_backward_pass(1), ValueError);
  Lomo clipped({Tensor::zeros({3}).set_requires_grad(true)}, {.clip_grad_norm = 1.0});
  EXPECT_EQ(clipped.backward_passes(), 2);
}

TEST(Lomo, ClipGradNormWithoutTheNormPassIsAnError) {
  Tensor p = Tensor::from_floats({1.0f, 2.0f}, {2}).set_requires_grad(true);
  Lomo optimizer({p}, {.clip_grad_norm = 1.0});
  p.set_grad(Tensor::ones({2}));
  EXPECT_THROW(optimizer.step(), ValueError);
}

TEST(Lomo, RejectsOptionsOutOfRange) {
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  EXPECT_THROW(Lomo({p}, {.lr = -1.0}), ValueError);
  EXPECT_THROW(Lomo({p}, {.weight_decay = -1.0}), ValueError);
  EXPECT_THROW(Lomo({p}, {.clip_grad_norm = 0.0}), ValueError);
  EXPECT_THROW(Lomo({p}, {.clip_grad_value = -1.0}), ValueError);
}

TEST(Lomo, DestroyingTheOptimizerRemovesItsHooks) {
  Tensor p = Tensor::from_floats({1.0f}, {1}).set_requires_grad(true);
  { Lomo optimizer({p}, {.lr = 0.5}); }
  backward(sum(mul(p, p)));
  EXPECT_TRUE(p.grad().defined());  // no hook dropped it
  EXPECT_EQ(p.to_float_vector(), (std::vector<float>{1.0f}));
}

// One window of 8 bytes of the training tests' text: activations small beside the gradients.
Tensor token_ids() { return test_data::tiny_text_batch(0, 1, 8).first; }

struct StepMemory {
  size_t peak = 0;        // allocated_bytes.all.peak during step 2, above `base`
  size_t after = 0;       // allocated after step 2, above `base`
  size_t parameters = 0;  // bytes of the parameters' blocks
  size_t gradients = 0;   // bytes a full set of fp32 gradient blocks takes
  size_t largest_gradient = 0;
  int most_gradients_alive = 0;  // during backward, as each gradient arrived
  float loss_first = 0.0f, loss_last = 0.0f;
};

// Two training steps of the tiny GPT-2 with `optim`; the figures of the second.
StepMemory train_two_steps(const std::string& optim) {
  StepMemory m;
  const Tensor ids = token_ids();
  const size_t base = memory_allocated(kCPU);
  auto model = make_causal_lm(HfConfig(test_data::tiny_text_gpt2()), kCPU, /*seed=*/3);
  const auto params = model->named_parameters();
  for (const auto& [name, p] : params) {
    m.parameters += optim_test::round_to_block(p.nbytes());
    m.gradients += optim_test::round_to_block(p.nbytes());
    m.largest_gradient = std::max(m.largest_gradient, optim_test::round_to_block(p.nbytes()));
  }
  // Registered before the optimizer's own hooks, so each runs just before LOMO's update.
  int alive_max = 0;
  for (const auto& [name, p] : params) {
    register_post_accumulate_grad_hook(p, [&](const Tensor&) {
      int alive = 0;
      for (const auto& [other_name, other] : params) alive += other.grad().defined();
      alive_max = std::max(alive_max, alive);
    });
  }
  std::unique_ptr<Optimizer> optimizer;
  if (optim == "lomo") optimizer = std::make_unique<Lomo>(params, LomoOptions{.lr = 1e-2});
  if (optim == "adamw") optimizer = std::make_unique<AdamW>(params, AdamWOptions{.lr = 1e-3});
  if (optim == "sgd") optimizer = std::make_unique<SGD>(params, SGDOptions{.lr = 1e-2});
  for (int step = 0; step < 2; ++step) {
    if (step == 1) {
      reset_peak_memory_stats(kCPU);
      alive_max = 0;
    }
    Tensor loss = model->loss(ids, ids);
    (step == 0 ? m.loss_first : m.loss_last) = static_cast<float>(loss.item());
    backward(loss);
    loss = Tensor();
    optimizer->step();
    optimizer->zero_grad();
  }
  m.peak = max_memory_allocated(kCPU) - base;
  m.most_gradients_alive = alive_max;
  optimizer.reset();
  m.after = memory_allocated(kCPU) - base;
  return m;
}

TEST(Lomo, NoGradientOutlivesItsUpdateOnGpt2) {
  const StepMemory lomo = train_two_steps("lomo");
  const StepMemory adamw = train_two_steps("adamw");
  const StepMemory sgd = train_two_steps("sgd");
  std::printf(
      "tiny GPT-2: %zu B of parameters; peak of a step above them: lomo %zu, sgd %zu, "
      "adamw %zu B; gradients %zu B\n",
      lomo.parameters, lomo.peak - lomo.parameters, sgd.peak - sgd.parameters,
      adamw.peak - adamw.parameters, lomo.gradients);
  // At most one parameter's gradient exists at any time in backward (the one being applied).
  EXPECT_EQ(lomo.most_gradients_alive, 1);
  EXPECT_GT(sgd.most_gradients_alive, 10);
  // After the step: the parameters and nothing else (0 bytes of state, no gradient).
  EXPECT_EQ(lomo.after, lomo.parameters);
  // AdamW holds all gradients and 8 B/param of state at its step; LOMO at most one gradient.
  EXPECT_LE(lomo.peak + lomo.gradients, adamw.peak);
  // SGD without momentum has no state either: its peak comes at its step, with every gradient
  // alive; LOMO's where activations and the gradient in hand are largest. With 8 tokens the
  // activations are small, and LOMO's peak is lower by more than half of all gradient bytes
  // (measured: 152576 B against 334848 B, gradients 287744 B).
  EXPECT_LE(lomo.peak + lomo.gradients / 2, sgd.peak);
  EXPECT_LT(lomo.loss_last, lomo.loss_first);
}

TEST(Lomo, GlobalNormOfPassZeroIsClipGradNorms) {
  const Tensor ids = token_ids();
  auto reference = make_causal_lm(HfConfig(test_data::tiny_text_gpt2()), kCPU, /*seed=*/5);
  backward(reference->loss(ids, ids));
  std::vector<Tensor> grads_of;
  for (const auto& [name, p] : reference->named_parameters()) grads_of.push_back(p);
  const double expected = grad_norm(grads_of);

  auto model = make_causal_lm(HfConfig(test_data::tiny_text_gpt2()), kCPU, /*seed=*/5);
  Lomo optimizer(model->named_parameters(), {.lr = 1e-2, .clip_grad_norm = 1e-3});
  Tensor loss = model->loss(ids, ids);
  optimizer.begin_backward_pass(0);
  backward(loss, Tensor(), /*retain_graph=*/true);
  for (const auto& [name, p] : model->named_parameters()) EXPECT_FALSE(p.grad().defined());
  optimizer.begin_backward_pass(1);
  EXPECT_NEAR(optimizer.grad_norm(), expected, 1e-6 * expected);
  backward(loss);
  optimizer.step();
  // The update was clipped to a global norm of 1e-3 * lr: parameters moved very little.
  const auto before = reference->named_parameters();
  const auto after = model->named_parameters();
  double moved = 0.0;
  for (size_t i = 0; i < before.size(); ++i) {
    const std::vector<float> a = before[i].second.to_float_vector();
    const std::vector<float> b = after[i].second.to_float_vector();
    for (size_t j = 0; j < a.size(); ++j) moved += static_cast<double>(a[j] - b[j]) * (a[j] - b[j]);
  }
  EXPECT_NEAR(std::sqrt(moved), 1e-3 * 1e-2, 1e-7);
}

}  // namespace
}  // namespace headroom
