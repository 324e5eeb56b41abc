// The trajectory fixtures of SGD, Lion, Adafactor and LOMO (tests/fixtures/optim/<name>_golden.txt,
// written by tools/gen_optim_golden.py), and the checks every one of those optimizers gets: its
// trajectory against the fixture, and a state_dict round trip in the middle of it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/tensor.h"
#include "optim/golden_lines.h"
#include "optim/optimizer.h"

namespace headroom::optim_test {

struct OptimGolden {
  std::vector<std::string> names;  // parameters in fixture order
  std::map<std::string, Shape> shapes;
  std::map<std::string, std::vector<float>> init;
  std::map<std::pair<int, std::string>, std::vector<float>> grads;    // (step, name)
  std::map<std::string, std::map<std::string, std::string>> options;  // case -> key -> value
  std::map<std::tuple<std::string, int, std::string>, std::vector<float>> values;
  int steps = 0;

  // The option `key` of `case_name` as a number; nullopt for None.
  std::optional<double> number(const std::string& case_name, const std::string& key) const {
    const std::string& text = options.at(case_name).at(key);
    if (text == "None") return std::nullopt;
    return std::strtod(text.c_str(), nullptr);
  }
  bool flag(const std::string& case_name, const std::string& key) const {
    return options.at(case_name).at(key) == "True";
  }
};

inline OptimGolden read_optim_golden(const std::string& file) {
  OptimGolden golden;
  for_each_golden_line(file, [&](const std::string& keyword, std::istringstream& in) {
    if (keyword == "param") {
      auto [name, shape] = read_param(in);
      golden.names.push_back(name);
      golden.shapes[name] = shape;
    } else if (keyword == "init") {
      std::string name;
      in >> name;
      golden.init[name] = read_floats(in);
    } else if (keyword == "grad") {
      int step = 0;
      std::string name;
      in >> step >> name;
      golden.grads[{step, name}] = read_floats(in);
      golden.steps = std::max(golden.steps, step);
    } else if (keyword == "case") {
      std::string name, entry;
      in >> name;
      auto& options = golden.options[name];
      while (in >> entry) {
        const size_t eq = entry.find('=');
        options[entry.substr(0, eq)] = entry.substr(eq + 1);
      }
    } else if (keyword == "value") {
      std::string case_name, name;
      int step = 0;
      in >> case_name >> step >> name;
      golden.values[{case_name, step, name}] = read_floats(in);
    }
  });
  return golden;
}

// Fresh leaves holding the fixture's initial values, in fixture order.
inline std::vector<NamedTensor> golden_params(const OptimGolden& golden) {
  std::vector<NamedTensor> params;
  for (const std::string& name : golden.names) {
    Tensor t = Tensor::from_floats(golden.init.at(name), golden.shapes.at(name));
    t.set_requires_grad(true);
    params.emplace_back(name, t);
  }
  return params;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(const std::vector<NamedTensor>&)>;
// One optimizer step with the fixture's gradients of `step`; by default set_grad, then step().
using StepWithGradients =
    std::function<void(Optimizer&, const std::vector<NamedTensor>&, const OptimGolden&, int step)>;

inline void step_with_set_grad(Optimizer& optimizer, const std::vector<NamedTensor>& params,
                               const OptimGolden& golden, int step) {
  for (const auto& [name, param] : params) {
    param.set_grad(Tensor::from_floats(golden.grads.at({step, name}), param.shape()));
  }
  optimizer.step();
}

// Every value after every step within rel_tol * |want| + abs_tol of the fixture; prints how many
// are bit-identical.
inline void expect_golden_trajectory(const OptimGolden& golden, const std::string& case_name,
                                     const MakeOptimizer& make, double rel_tol, double abs_tol,
                                     const StepWithGradients& step_fn = step_with_set_grad) {
  ASSERT_EQ(golden.steps, 10);
  ASSERT_TRUE(golden.options.count(case_name)) << case_name;
  const std::vector<NamedTensor> params = golden_params(golden);
  const std::unique_ptr<Optimizer> optimizer = make(params);
  int compared = 0, bit_identical = 0;
  for (int step = 1; step <= golden.steps; ++step) {
    step_fn(*optimizer, params, golden, step);
    for (const auto& [name, param] : params) {
      const std::vector<float> got = param.to_float_vector();
      const std::vector<float>& want = golden.values.at({case_name, step, name});
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_LE(std::abs(got[i] - want[i]), rel_tol * std::abs(want[i]) + abs_tol)
            << case_name << ": " << name << "[" << i << "] after step " << step << ": " << got[i]
            << " vs reference " << want[i];
        ++compared;
        bit_identical += got[i] == want[i];
      }
    }
  }
  std::printf("%s: %d of %d values bit-identical to the reference\n", case_name.c_str(),
              bit_identical, compared);
}

// 5 steps, state_dict, load_state_dict into a fresh optimizer over copies of the parameters, 5
// more steps: the same bits as 10 uninterrupted steps.
inline void expect_state_dict_round_trip(const OptimGolden& golden, const MakeOptimizer& make,
                                         const StepWithGradients& step_fn = step_with_set_grad) {
  const std::vector<NamedTensor> straight = golden_params(golden);
  const std::unique_ptr<Optimizer> uninterrupted = make(straight);
  for (int step = 1; step <= 10; ++step) step_fn(*uninterrupted, straight, golden, step);

  const std::vector<NamedTensor> first = golden_params(golden);
  OptimizerStateDict saved;
  {
    const std::unique_ptr<Optimizer> before = make(first);
    for (int step = 1; step <= 5; ++step) step_fn(*before, first, golden, step);
    saved = before->state_dict();
    for (auto& [key, tensor] : saved.tensors) tensor = tensor.clone();  // as a file would hold it
  }
  std::vector<NamedTensor> resumed;
  for (const auto& [name, param] : first) {
    resumed.emplace_back(name, param.detach().clone().set_requires_grad(true));
  }
  const std::unique_ptr<Optimizer> after = make(resumed);
  after->load_state_dict(saved);
  for (int step = 6; step <= 10; ++step) step_fn(*after, resumed, golden, step);
  for (size_t p = 0; p < straight.size(); ++p) {
    EXPECT_EQ(resumed[p].second.to_float_vector(), straight[p].second.to_float_vector())
        << straight[p].first;
  }
}

inline size_t round_to_block(size_t bytes) {
  const size_t block = 512;  // CachingAllocator::kMinBlockSize
  return (bytes + block - 1) / block * block;
}

}  // namespace headroom::optim_test
