// Optimizer state_dict / load_state_dict: 5 steps, save, load into a fresh optimizer over the same
// parameters, 5 more steps equal 10 uninterrupted steps bit for bit (AdamW with f32 and bf16
// states, pure-bf16 parameters with stochastic rounding or Kahan, AdamW8bit), and mismatches
// refused with a ValueError naming the entry.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/adamw_8bit.h"

namespace headroom {
namespace {

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(const std::vector<NamedTensor>&)>;

// Parameters "w" [80, 64] (5120 elements: 8-bit states for AdamW8bit) and "b" [100].
std::vector<NamedTensor> make_params(DType dtype) {
  Generator gen(11);
  std::vector<NamedTensor> params;
  for (const auto& [name, shape] : {std::pair<std::string, Shape>{"w", {80, 64}}, {"b", {100}}}) {
    params.emplace_back(
        name, Tensor::randn(shape, DType::f32, kCPU, &gen).to(dtype).set_requires_grad(true));
  }
  return params;
}

void run_steps(Optimizer& optimizer, const std::vector<NamedTensor>& params, int first, int last) {
  for (int step = first; step <= last; ++step) {
    for (const auto& [name, param] : params) {
      Generator gen(static_cast<uint64_t>(1000 * step + param.numel()));
      param.set_grad(Tensor::randn(param.shape(), DType::f32, kCPU, &gen).to(param.dtype()));
    }
    optimizer.step();
  }
}

// Each tensor cloned, as a checkpoint on disk holds its own copy.
OptimizerStateDict detached(const OptimizerStateDict& state) {
  OptimizerStateDict copy{.meta = state.meta, .tensors = {}};
  for (const auto& [name, tensor] : state.tensors) copy.tensors.emplace_back(name, tensor.clone());
  return copy;
}

void expect_resume_equals_uninterrupted(const MakeOptimizer& make, DType dtype) {
  const std::vector<NamedTensor> straight = make_params(dtype);
  auto uninterrupted = make(straight);
  run_steps(*uninterrupted, straight, 1, 10);

  const std::vector<NamedTensor> resumed = make_params(dtype);
  OptimizerStateDict saved;
  {
    auto first = make(resumed);
    run_steps(*first, resumed, 1, 5);
    saved = detached(first->state_dict());
  }
  auto second = make(resumed);
  second->load_state_dict(saved);
  run_steps(*second, resumed, 6, 10);
  for (size_t k = 0; k < straight.size(); ++k) {
    EXPECT_EQ(resumed[k].second.to_float_vector(), straight[k].second.to_float_vector())
        << straight[k].first;
  }
}

MakeOptimizer adamw(AdamWOptions options) {
  return [options](const std::vector<NamedTensor>& params) {
    return std::make_unique<AdamW>(params, options);
  };
}

TEST(OptimizerStateDict, AdamWF32StatesResumeBitForBit) {
  expect_resume_equals_uninterrupted(adamw({.weight_decay = 0.1}), DType::f32);
}

TEST(OptimizerStateDict, AdamWBf16StatesResumeBitForBit) {
  expect_resume_equals_uninterrupted(adamw({.state_dtype = DType::bf16}), DType::f32);
}

TEST(OptimizerStateDict, PureBf16StochasticRoundingResumesBitForBit) {
  // The generator's offset is in the state: a resumed run draws the numbers the original would.
  expect_resume_equals_uninterrupted(
      adamw({.lr = 1e-4, .state_dtype = DType::bf16, .stochastic_rounding = true}), DType::bf16);
}

TEST(OptimizerStateDict, PureBf16KahanResumesBitForBit) {
  expect_resume_equals_uninterrupted(
      adamw({.lr = 1e-4, .state_dtype = DType::bf16, .kahan_summation = true}), DType::bf16);
}

TEST(OptimizerStateDict, AdamW8bitResumesBitForBit) {
  expect_resume_equals_uninterrupted(
      [](const std::vector<NamedTensor>& params) {
        return std::make_unique<AdamW8bit>(params, AdamW8bitOptions{.weight_decay = 0.1});
      },
      DType::f32);
}

TEST(OptimizerStateDict, AdamW8bitStateHoldsCodesAndAbsmax) {
  const std::vector<NamedTensor> params = make_params(DType::f32);
  AdamW8bit optimizer(params);
  run_steps(optimizer, params, 1, 2);
  const OptimizerStateDict state = optimizer.state_dict();
  EXPECT_EQ(state.meta.at("optimizer"), "adamw_8bit");
  EXPECT_EQ(state.meta.at("state").at("0.0").at("step"), 2);
  std::map<std::string, Tensor> tensors(state.tensors.begin(), state.tensors.end());
  EXPECT_EQ(tensors.at("state.0.0.state1").dtype(), DType::u8);
  EXPECT_EQ(tensors.at("state.0.0.absmax2").shape(), Shape({20}));  // 5120 / 256
  EXPECT_EQ(tensors.at("state.0.1.state1").dtype(), DType::f32);    // 100 < min_8bit_size
  EXPECT_EQ(tensors.count("state.0.1.absmax1"), 0u);
}

// The message of the ValueError that load_state_dict throws, or "" when it throws none.
std::string load_error(Optimizer& optimizer, const OptimizerStateDict& state) {
  try {
    optimizer.load_state_dict(state);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(OptimizerStateDict, MismatchesAreValueErrors) {
  const std::vector<NamedTensor> params = make_params(DType::f32);
  AdamW saved_from(params);
  run_steps(saved_from, params, 1, 1);
  const OptimizerStateDict state = saved_from.state_dict();

  AdamW bf16_states(params, {.state_dtype = DType::bf16});
  EXPECT_NE(load_error(bf16_states, state).find("of optimizer 'adamw_torch', not 'adamw_bf16'"),
            std::string::npos);
  AdamW8bit eight_bit(params);
  EXPECT_NE(load_error(eight_bit, state).find("'adamw_torch'"), std::string::npos);

  // The same names over a differently shaped "w".
  std::vector<NamedTensor> other = make_params(DType::f32);
  other[0].second = Tensor::zeros({64, 80}).set_requires_grad(true);
  AdamW wrong_shape(other);
  const std::string shape_error = load_error(wrong_shape, state);
  EXPECT_NE(shape_error.find("'state.0.0.exp_avg'"), std::string::npos) << shape_error;

  OptimizerStateDict missing = state;
  missing.tensors.erase(missing.tensors.begin() + 1);  // state.0.0.exp_avg_sq
  AdamW fresh(params);
  const std::string missing_error = load_error(fresh, missing);
  EXPECT_NE(missing_error.find("no tensor 'state.0.0.exp_avg_sq'"), std::string::npos)
      << missing_error;

  OptimizerStateDict no_generator = state;
  no_generator.meta.erase("rounding_generator");
  EXPECT_NE(load_error(fresh, no_generator).find("no entry 'rounding_generator'"),
            std::string::npos);

  std::vector<NamedTensor> renamed = make_params(DType::f32);
  renamed[1].first = "bias";
  AdamW other_names(renamed);
  EXPECT_NE(load_error(other_names, state).find("'b' saved, 'bias' here"), std::string::npos);
}

// A saved state is checked as the constructor checks its options (issue 19): a float step count
// (1e300 became undefined behaviour and NaN losses), a negative weight_decay, a generator offset
// that is not an unsigned integer.
TEST(OptimizerStateDict, EveryFieldIsCheckedOnLoad) {
  const std::vector<NamedTensor> params = make_params(DType::f32);
  AdamW saved_from(params, {.weight_decay = 0.1});
  run_steps(saved_from, params, 1, 1);
  const OptimizerStateDict state = saved_from.state_dict();
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& text) {
    OptimizerStateDict bad = state;
    edit(bad.meta);
    AdamW fresh(params, {.weight_decay = 0.1});
    const std::string error = load_error(fresh, bad);
    EXPECT_NE(error.find(text), std::string::npos) << error;
  };
  refused([](nlohmann::json& m) { m["state"]["0.0"]["step"] = 1e300; }, "'step' is 1e+300");
  refused([](nlohmann::json& m) { m["state"]["0.1"]["step"] = -1; }, "'step' is -1");
  refused([](nlohmann::json& m) { m["param_groups"][0]["weight_decay"] = -0.5; },
          "'weight_decay' is -0.5");
  refused([](nlohmann::json& m) { m["param_groups"][0]["lr"] = "0.1"; }, "'lr' is \"0.1\"");
  refused([](nlohmann::json& m) { m["rounding_generator"]["offset"] = 2.5; }, "'offset' is 2.5");
  refused([](nlohmann::json& m) { m["rounding_generator"]["seed"] = -3; }, "'seed' is -3");
}

}  // namespace
}  // namespace headroom
