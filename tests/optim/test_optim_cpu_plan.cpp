// Every optimizer on one code path (Note [Kernel tables]): a real CPU step allocates exactly what
// the meta device's dry run of the same step allocates, whichever device the dry run stands in
// for, with f32 and with bf16 parameters (the 16-bit ones updated in place: no fp32 copy), and
// the bf16 steps move a parameter as the f32 step does, rounded once.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "core/generator.h"
#include "ops/device_peak.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/adamw_8bit.h"
#include "optim/lion.h"
#include "optim/lion_8bit.h"
#include "optim/lomo.h"
#include "optim/sgd.h"

namespace headroom {
namespace {

using MakeOptimizer =
    std::function<std::unique_ptr<Optimizer>(const std::vector<Tensor>& params, DType dtype)>;

// A matrix (factored by Adafactor, 8-bit states for AdamW8bit below) and a vector, with
// gradients of their own dtype; random values on the CPU.
std::vector<Tensor> params_on(Device device, DType dtype) {
  Generator generator(7);
  std::vector<Tensor> params;
  for (const Shape& shape : {Shape{48, 40}, Shape{70}}) {
    Tensor p = Tensor::randn(shape, DType::f32, kCPU, &generator).to(dtype).to(device);
    p.set_requires_grad(true);
    p.set_grad(Tensor::randn(shape, DType::f32, kCPU, &generator).to(dtype).to(device));
    params.push_back(p);
  }
  return params;
}

// The peak growth of the optimizer's first step (states made) and of its second.
std::pair<int64_t, int64_t> step_peaks(const MakeOptimizer& make, DType dtype, Device device) {
  const std::vector<Tensor> params = params_on(device, dtype);
  const std::unique_ptr<Optimizer> optimizer = make(params, dtype);
  const int64_t first = peak_growth_on(device, [&] { optimizer->step(); });
  const int64_t second = peak_growth_on(device, [&] { optimizer->step(); });
  return {first, second};
}

void expect_steps_as_planned(const MakeOptimizer& make) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_cpu_run_as_planned([&](Device device) { return step_peaks(make, dtype, device); });
  }
}

TEST(OptimCpuPlan, AdamWStepsAsPlanned) {
  expect_steps_as_planned([](const std::vector<Tensor>& params, DType dtype) {
    // bf16 states for bf16 parameters, written back with stochastic rounding (the default).
    return std::make_unique<AdamW>(params, AdamWOptions{.state_dtype = dtype});
  });
  expect_steps_as_planned([](const std::vector<Tensor>& params, DType) {
    return std::make_unique<AdamW>(params, AdamWOptions{.kahan_summation = true});
  });
}

TEST(OptimCpuPlan, AdamW8bitStepsAsPlanned) {
  expect_steps_as_planned([](const std::vector<Tensor>& params, DType) {
    return std::make_unique<AdamW8bit>(params, AdamW8bitOptions{.min_8bit_size = 1024});
  });
}

TEST(OptimCpuPlan, Lion8bitStepsAsPlanned) {
  expect_steps_as_planned([](const std::vector<Tensor>& params, DType) {
    return std::make_unique<Lion8bit>(params,
                                      Lion8bitOptions{.weight_decay = 0.1, .min_8bit_size = 1024});
  });
}

TEST(OptimCpuPlan, LionStepsAsPlanned) {
  expect_steps_as_planned([](const std::vector<Tensor>& params, DType) {
    return std::make_unique<Lion>(params, LionOptions{.weight_decay = 0.1});
  });
}

TEST(OptimCpuPlan, SgdStepsAsPlanned) {
  expect_steps_as_planned([](const std::vector<Tensor>& params, DType) {
    return std::make_unique<SGD>(params, SGDOptions{.lr = 0.1, .momentum = 0.9});
  });
}

TEST(OptimCpuPlan, AdafactorStepsAsPlanned) {
  expect_steps_as_planned([](const std::vector<Tensor>& params, DType) {
    return std::make_unique<Adafactor>(params, AdafactorOptions{.beta1 = 0.9});
  });
}

TEST(OptimCpuPlan, LomoStepsAsPlanned) {
  expect_steps_as_planned([](const std::vector<Tensor>& params, DType) {
    return std::make_unique<Lomo>(params, LomoOptions{.lr = 0.1, .clip_grad_value = 0.5});
  });
}

// LOMO's clip_grad_norm on the CPU: the partial norms and the [2] result, as on meta. The
// parameters themselves are backward's roots, so no op runs between them and their hooks.
TEST(OptimCpuPlan, LomoGlobalNormAllocatesAsPlanned) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_cpu_run_as_planned([&](Device device) {
      const std::vector<Tensor> params = params_on(device, dtype);
      std::vector<Tensor> grads;
      for (const Tensor& p : params) {
        grads.push_back(p.grad());
        p.set_grad(Tensor());
      }
      Lomo lomo(params, {.lr = 0.1, .clip_grad_norm = 1.0});
      auto pass = [&](int index) {
        lomo.begin_backward_pass(index);
        backward(params, grads);
      };
      const int64_t measure = peak_growth_on(device, [&] { pass(0); });
      const int64_t update = peak_growth_on(device, [&] {
        pass(1);
        lomo.step();
      });
      return std::pair<int64_t, int64_t>{measure, update};
    });
  }
}

// The bf16 steps are the f32 steps on the same values, rounded once (each optimizer's update is
// elementwise given its statistics, which the bf16 step computes in fp32 from the same values).
TEST(OptimCpuPlan, Bf16StepIsTheF32StepRoundedOnce) {
  const std::vector<std::pair<const char*, MakeOptimizer>> optimizers = {
      {"lion", [](const std::vector<Tensor>& p, DType) { return std::make_unique<Lion>(p); }},
      {"sgd",
       [](const std::vector<Tensor>& p, DType) {
         return std::make_unique<SGD>(p,
                                      SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
       }},
      {"adafactor",
       [](const std::vector<Tensor>& p, DType) { return std::make_unique<Adafactor>(p); }},
      {"lomo", [](const std::vector<Tensor>& p,
                  DType) { return std::make_unique<Lomo>(p, LomoOptions{.lr = 0.1}); }},
      {"adamw",
       [](const std::vector<Tensor>& p, DType) {
         return std::make_unique<AdamW>(p, AdamWOptions{.stochastic_rounding = false});
       }},
      // Without weight decay bitsandbytes' second rounding (after the decay) rounds nothing,
      // and an lr of 2^-10 is a bf16 value, so Lion8bit's step held in bf16 is the f32 one
      // (Note [bitsandbytes 16-bit parameters]). 8-bit states for the matrix.
      {"adamw_8bit",
       [](const std::vector<Tensor>& p, DType) {
         return std::make_unique<AdamW8bit>(
             p, AdamW8bitOptions{.weight_decay = 0.0, .min_8bit_size = 1024});
       }},
      {"lion_8bit", [](const std::vector<Tensor>& p, DType) {
         return std::make_unique<Lion8bit>(
             p, Lion8bitOptions{.lr = 0.0009765625, .min_8bit_size = 1024});
       }}};
  for (const auto& [name, make] : optimizers) {
    SCOPED_TRACE(name);
    // f32 parameters holding bf16 values, with bf16-valued gradients: the same inputs.
    std::vector<Tensor> wide = params_on(kCPU, DType::bf16);
    std::vector<Tensor> narrow = params_on(kCPU, DType::bf16);
    for (Tensor& p : wide) {
      Tensor widened = p.to(DType::f32).detach();
      widened.set_requires_grad(true);
      widened.set_grad(p.grad().to(DType::f32));
      p = widened;
    }
    make(wide, DType::f32)->step();
    make(narrow, DType::bf16)->step();
    for (size_t i = 0; i < wide.size(); ++i) {
      const std::vector<float> expected = wide[i].to(DType::bf16).to_float_vector();
      const std::vector<float> actual = narrow[i].to_float_vector();
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t j = 0; j < actual.size(); ++j) {
        ASSERT_EQ(actual[j], expected[j]) << "parameter " << i << " element " << j;
      }
    }
  }
}

}  // namespace
}  // namespace headroom
