// AdamW against torch.optim.AdamW (tests/fixtures/optim/adamw_golden.txt, written by
// tools/gen_adamw_golden.py), with fp32 and with bf16 states, its state memory to the byte, and
// the parameter-group helpers.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/kernel_census.h"
#include "memory/device_memory.h"
#include "ops/elementwise.h"
#include "optim/adamw.h"
#include "optim/golden_lines.h"

namespace headroom {
namespace {

Tensor leaf(const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::from_floats(values, shape);
  t.set_requires_grad(true);
  return t;
}

using optim_test::read_floats;

// The fixture, as its generator's docstring describes it.
struct Golden {
  AdamWOptions options;
  std::vector<std::string> names;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, double> weight_decay;
  std::map<std::string, std::vector<float>> init;
  std::map<int, double> lr_changes;
  std::map<std::pair<int, std::string>, std::vector<float>> grads, values;
  // The run with bf16 states (optim=adamw_bf16): parameters and states after each step.
  std::map<std::pair<int, std::string>, std::vector<float>> bf16_values, bf16_exp_avg,
      bf16_exp_avg_sq;
  int steps = 0;
};

Golden read_golden() {
  const std::string path = std::string(HEADROOM_FIXTURES_DIR) + "/optim/adamw_golden.txt";
  std::ifstream file(path);
  EXPECT_TRUE(file) << "cannot open " << path;
  Golden golden;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "options") {
      std::string key;
      AdamWOptions& o = golden.options;
      in >> key >> o.lr >> key >> o.beta1 >> key >> o.beta2 >> key >> o.eps;
    } else if (kind == "param") {
      std::string name;
      int ndim = 0;
      in >> name >> golden.weight_decay[name] >> ndim;
      golden.shapes[name].resize(ndim);
      for (int64_t& d : golden.shapes[name]) in >> d;
      golden.names.push_back(name);
    } else if (kind == "init") {
      std::string name;
      in >> name;
      golden.init[name] = read_floats(in);
    } else if (kind == "lr") {
      int step = 0;
      in >> step >> golden.lr_changes[step];
    } else if (kind == "grad" || kind == "value") {
      int step = 0;
      std::string name;
      in >> step >> name;
      (kind == "grad" ? golden.grads : golden.values)[{step, name}] = read_floats(in);
      golden.steps = std::max(golden.steps, step);
    } else if (kind == "bf16_value" || kind == "bf16_exp_avg" || kind == "bf16_exp_avg_sq") {
      int step = 0;
      std::string name;
      in >> step >> name;
      auto& values = kind == "bf16_value"     ? golden.bf16_values
                     : kind == "bf16_exp_avg" ? golden.bf16_exp_avg
                                              : golden.bf16_exp_avg_sq;
      values[{step, name}] = read_floats(in);
    }
  }
  return golden;
}

// Counts of values compared and of those bit-identical to the reference.
struct Agreement {
  int compared = 0, bit_identical = 0;
};

// `got` within rel_tol * |want| of `want`, element by element.
void expect_close_values(const Tensor& got_tensor, const std::vector<float>& want, double rel_tol,
                         const std::string& what, Agreement& agreement) {
  const std::vector<float> got = got_tensor.to_float_vector();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), rel_tol * std::abs(want[i]))
        << what << "[" << i << "]: " << got[i] << " vs torch " << want[i];
    ++agreement.compared;
    agreement.bit_identical += got[i] == want[i];
  }
}

// The fixture's 10 steps (its gradients, skipped step and learning-rate change) with `options`;
// `after_step(step, optimizer, params)` after each one.
void run_golden_steps(
    const Golden& golden, const AdamWOptions& options,
    const std::function<void(int, const AdamW&, std::map<std::string, Tensor>&)>& after_step) {
  ASSERT_EQ(golden.names.size(), 2u);
  ASSERT_EQ(golden.steps, 10);
  std::vector<ParamGroup> groups;
  std::map<std::string, Tensor> params;
  for (const std::string& name : golden.names) {
    params[name] = leaf(golden.init.at(name), Shape(golden.shapes.at(name)));
    groups.push_back(
        {.params = {{name, params[name]}}, .weight_decay = golden.weight_decay.at(name)});
  }
  AdamW optimizer(groups, options);
  for (int step = 1; step <= golden.steps; ++step) {
    if (auto it = golden.lr_changes.find(step); it != golden.lr_changes.end()) {
      optimizer.set_lr(it->second);
    }
    for (const std::string& name : golden.names) {
      auto grad = golden.grads.find({step, name});
      params[name].set_grad(grad == golden.grads.end()
                                ? Tensor()
                                : Tensor::from_floats(grad->second, params[name].shape()));
    }
    optimizer.step();
    after_step(step, optimizer, params);
  }
}

TEST(AdamW, MatchesTorchGolden) {
  const Golden golden = read_golden();
  Agreement agreement;
  run_golden_steps(golden, golden.options,
                   [&](int step, const AdamW& optimizer, std::map<std::string, Tensor>& params) {
                     for (const std::string& name : golden.names) {
                       expect_close_values(params[name], golden.values.at({step, name}), 1e-6,
                                           str_cat(name, " after step ", step), agreement);
                     }
                     if (step < golden.steps) return;
                     // A skipped step leaves the count behind: "b" had no gradient at one step.
                     EXPECT_EQ(optimizer.state(0, 0).step, 10);
                     EXPECT_EQ(optimizer.state(1, 0).step, 9);
                   });
  std::printf("%d of %d values bit-identical to torch\n", agreement.bit_identical,
              agreement.compared);
}

// optim=adamw_bf16 against the fixture's bf16-state run: torch.optim.AdamW with its states rounded
// to bf16 after every step, which is headroom's rule (the update in fp32, the states stored
// rounded to nearest; see tools/gen_adamw_golden.py). The stored states are bf16 numbers and must
// be the same numbers; the parameters get the fp32 test's tolerance, as torch fuses the state
// updates' multiply-adds and headroom's mixed-dtype kernel does not.
TEST(AdamW, Bf16StatesMatchTorchGolden) {
  const Golden golden = read_golden();
  ASSERT_EQ(golden.bf16_values.size(), 20u);
  ASSERT_EQ(golden.bf16_exp_avg.size(), 19u);  // none for "b" at its skipped step
  AdamWOptions options = golden.options;
  options.state_dtype = DType::bf16;
  Agreement param_agreement, state_agreement;
  run_golden_steps(golden, options,
                   [&](int step, const AdamW& optimizer, std::map<std::string, Tensor>& params) {
                     for (size_t g = 0; g < golden.names.size(); ++g) {
                       const std::string& name = golden.names[g];
                       const std::string what = str_cat(name, " after step ", step);
                       expect_close_values(params[name], golden.bf16_values.at({step, name}), 1e-6,
                                           what, param_agreement);
                       const AdamWState& state = optimizer.state(g, 0);
                       EXPECT_EQ(state.exp_avg.dtype(), DType::bf16);
                       if (!golden.bf16_exp_avg.count({step, name}))
                         continue;  // skipped: unchanged
                       expect_close_values(state.exp_avg, golden.bf16_exp_avg.at({step, name}), 0.0,
                                           "exp_avg of " + what, state_agreement);
                       expect_close_values(state.exp_avg_sq,
                                           golden.bf16_exp_avg_sq.at({step, name}), 0.0,
                                           "exp_avg_sq of " + what, state_agreement);
                     }
                   });
  EXPECT_EQ(state_agreement.bit_identical, state_agreement.compared);
  std::printf(
      "bf16 states: %d of %d parameter values bit-identical to torch, %d of %d state "
      "values\n",
      param_agreement.bit_identical, param_agreement.compared, state_agreement.bit_identical,
      state_agreement.compared);
}

size_t round_to_block(size_t bytes) {
  const size_t block = 512;  // CachingAllocator::kMinBlockSize, with no roundup_power2_divisions
  return (bytes + block - 1) / block * block;
}

TEST(AdamW, StateGrowsAllocatedMemoryByEightBytesPerElement) {
  // 60 B, 4000 B, 516 B and exactly one block per state tensor; the last parameter gets no
  // gradient and so no state.
  const std::vector<Shape> shapes = {{3, 5}, {1000}, {129}, {128}, {7}};
  std::vector<Tensor> params;
  for (const Shape& shape : shapes) {
    params.push_back(Tensor::zeros(shape).set_requires_grad(true));
  }
  for (size_t i = 0; i + 1 < params.size(); ++i) params[i].set_grad(Tensor::ones(shapes[i]));
  AdamW optimizer(params);

  size_t expected = 0;
  for (size_t i = 0; i + 1 < params.size(); ++i) {
    expected += 2 * round_to_block(4 * static_cast<size_t>(shapes[i].numel()));
  }
  ASSERT_EQ(expected, 2u * (512 + 4096 + 1024 + 512));

  const size_t before = memory_allocated(kCPU);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kCPU) - before, expected);
  optimizer.step();  // the update itself allocates nothing
  EXPECT_EQ(memory_allocated(kCPU) - before, expected);
  EXPECT_FALSE(optimizer.state(0, 4).exp_avg.defined());
  EXPECT_EQ(optimizer.state(0, 4).step, 0);
  EXPECT_EQ(optimizer.state(0, 0).exp_avg.dtype(), DType::f32);
}

TEST(AdamW, DryRunOnMetaAllocatesTheStateAndComputesNothing) {
  Tensor param = Tensor::empty({256, 1024}, DType::f32, kMeta).set_requires_grad(true);
  param.set_grad(Tensor::empty({256, 1024}, DType::f32, kMeta));
  AdamW optimizer({param});
  const size_t before = memory_allocated(kMeta);
  optimizer.step();
  EXPECT_EQ(memory_allocated(kMeta) - before, 2u * 256 * 1024 * 4);
  EXPECT_EQ(optimizer.state(0, 0).step, 1);
}

TEST(AdamW, DefaultsAreTorchs) {
  const AdamWOptions o;
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.beta1, 0.9);
  EXPECT_EQ(o.beta2, 0.999);
  EXPECT_EQ(o.eps, 1e-8);
  EXPECT_EQ(o.weight_decay, 1e-2);
}

TEST(AdamW, FirstStepMovesEachElementByLrAgainstItsGradientSign) {
  // After one step m/sqrt(v) = sign(g) exactly (bias-corrected), so p -= lr*wd*p + lr*sign(g).
  Tensor p = leaf({1.0f, -2.0f, 0.5f}, {3});
  p.set_grad(Tensor::from_floats({3.0f, -0.25f, 0.0f}, {3}));
  AdamW optimizer({p}, {.lr = 0.1, .eps = 0.0, .weight_decay = 0.5});
  optimizer.step();
  const std::vector<float> got = p.to_float_vector();
  EXPECT_NEAR(got[0], 1.0f * 0.95f - 0.1f, 1e-6);
  EXPECT_NEAR(got[1], -2.0f * 0.95f + 0.1f, 1e-6);
  EXPECT_TRUE(std::isnan(got[2])) << "0/0 with eps 0, as in torch";
}

TEST(AdamW, ThreadCountDoesNotChangeResults) {
  const Shape shape{3 * (1 << 17) + 5};  // several OpenMP chunks and a ragged tail
  const Tensor init = Tensor::randn(shape);
  const Tensor grad = Tensor::randn(shape);
  std::vector<std::vector<float>> results;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 4}) {
    omp_set_num_threads(threads);
    Tensor p = init.clone().set_requires_grad(true);
    AdamW optimizer({p}, {.weight_decay = 0.1});
    for (int step = 0; step < 3; ++step) {
      p.set_grad(grad);
      optimizer.step();
    }
    results.push_back(p.to_float_vector());
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
}

// Note [Tensor lists] (backend/kernel_table.h): one update call per list of parameters that share
// a group, a step count and a dtype, sliced at the list capacity, with results bit for bit those
// of an optimizer per parameter: 900 parameters in two groups, a third of them bf16 (rounded to
// nearest; the stochastic streams' order is the golden tests'), fifteen that miss step 0's gradient
// and so run one step behind from then on.
TEST(AdamW, ListUpdatesMatchOneOptimizerPerParameter) {
  constexpr int kParams = 900;
  Generator gen(11);
  std::vector<Tensor> listed, alone;
  std::vector<ParamGroup> groups(2);
  for (int i = 0; i < kParams; ++i) {
    const DType dtype = i % 3 == 0 ? DType::bf16 : DType::f32;
    const Tensor init = Tensor::randn({i % 5 + 2}, DType::f32, kCPU, &gen).to(dtype);
    listed.push_back(init.clone().set_requires_grad(true));
    alone.push_back(init.clone().set_requires_grad(true));
    groups[static_cast<size_t>(i % 2)].params.emplace_back(std::to_string(i), listed.back());
  }
  const AdamWOptions options{.lr = 1e-2, .weight_decay = 0.1, .stochastic_rounding = false};
  groups[1].weight_decay = 0.0;
  AdamW together(groups, options);
  std::vector<std::unique_ptr<AdamW>> single;
  for (int i = 0; i < kParams; ++i) {
    AdamWOptions own = options;
    own.weight_decay = i % 2 == 0 ? 0.1 : 0.0;
    single.push_back(std::make_unique<AdamW>(std::vector<Tensor>{alone[i]}, own));
  }
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < kParams; ++i) {
      const bool has_grad = !(step == 0 && i % 60 == 7);
      const Tensor grad = Tensor::randn({i % 5 + 2}, DType::f32, kCPU, &gen);
      listed[i].set_grad(has_grad ? grad : Tensor());
      alone[i].set_grad(has_grad ? grad : Tensor());
    }
    KernelCensus census;
    {
      KernelCensusScope scope(census);
      together.step();
    }
    for (int i = 0; i < kParams; ++i) single[static_cast<size_t>(i)]->step();
    int updates = 0;
    for (const KernelLaunch& l : census.launches()) {
      updates += std::string(l.family) == "adamw" && std::string(l.entry) == "update";
    }
    // Per group 300 f32 parameters (a slice of 256 and one of 44) and 150 bf16 ones. The 15
    // behind (i % 60 == 7: odd and not a multiple of 3, so f32 in group 1) leave 285 f32 there
    // (two slices) and from step 1 form a list of their own.
    EXPECT_EQ(updates, step == 0 ? 6 : 7) << "step " << step;
    for (int i = 0; i < kParams; ++i) {
      ASSERT_EQ(listed[i].to_float_vector(), alone[i].to_float_vector())
          << "parameter " << i << " after step " << step;
    }
  }
}

TEST(AdamW, StepRecordsNoHistory) {
  Tensor p = leaf({1.0f, 2.0f}, {2});
  p.set_grad(Tensor::ones({2}));
  AdamW optimizer({p});
  optimizer.step();
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
}

TEST(AdamW, ZeroGradSetsToNoneOrFillsZeros) {
  Tensor p = leaf({1.0f, 2.0f}, {2});
  AdamW optimizer({p});
  p.set_grad(Tensor::ones({2}));
  optimizer.zero_grad(false);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(p.grad().to_float_vector(), (std::vector<float>{0.0f, 0.0f}));
  optimizer.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(AdamW, LrIsSettableForSchedulers) {
  Tensor a = leaf({1.0f}, {1}), b = leaf({2.0f}, {1});
  AdamW optimizer(
      std::vector<ParamGroup>{{.params = {{"a", a}}}, {.params = {{"b", b}}, .lr = 0.5}});
  EXPECT_EQ(optimizer.lr(), 1e-3);
  EXPECT_EQ(*optimizer.param_groups()[1].lr, 0.5);
  optimizer.set_lr(0.25);
  EXPECT_EQ(*optimizer.param_groups()[0].lr, 0.25);
  EXPECT_EQ(*optimizer.param_groups()[1].lr, 0.25);
  EXPECT_THROW(optimizer.set_lr(-1.0), ValueError);
}

TEST(AdamW, RejectsWhatTorchRejects) {
  Tensor p = leaf({1.0f}, {1});
  EXPECT_THROW(AdamW({p}, {.lr = -1.0}), ValueError);
  EXPECT_THROW(AdamW({p}, {.beta1 = 1.0}), ValueError);
  EXPECT_THROW(AdamW({p}, {.beta2 = -0.1}), ValueError);
  EXPECT_THROW(AdamW({p}, {.eps = -1e-8}), ValueError);
  EXPECT_THROW(AdamW({p}, {.weight_decay = -0.1}), ValueError);
  EXPECT_THROW(AdamW(std::vector<Tensor>{p, p}), ValueError);
  EXPECT_THROW(AdamW({mul(p, p)}), ValueError);  // not a leaf
  EXPECT_THROW(AdamW({Tensor()}), ValueError);
}

TEST(AdamW, IntegerParametersAndGradientsAreNotImplemented) {
  Tensor p = Tensor::zeros({4}, DType::i32);
  try {
    AdamW optimizer(std::vector<Tensor>{p});
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
  Tensor q = leaf({1.0f}, {1});
  AdamW optimizer({q});
  q.set_grad(Tensor::ones({1}, DType::i32));
  EXPECT_THROW(optimizer.step(), NotImplementedError);
}

TEST(ParamGroups, DecayParameterNamesAreTheMatrices) {
  const std::vector<NamedTensor> named = {{"wte.weight", Tensor::zeros({10, 4})},
                                          {"h.0.ln_1.weight", Tensor::zeros({4})},
                                          {"h.0.ln_1.bias", Tensor::zeros({4})},
                                          {"h.0.attn.c_attn.weight", Tensor::zeros({4, 12})},
                                          {"h.0.attn.c_attn.bias", Tensor::zeros({12})}};
  EXPECT_EQ(decay_parameter_names(named),
            (std::vector<std::string>{"wte.weight", "h.0.attn.c_attn.weight"}));

  const std::vector<ParamGroup> groups = weight_decay_param_groups(named, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(*groups[0].weight_decay, 0.1);
  EXPECT_EQ(*groups[1].weight_decay, 0.0);
  ASSERT_EQ(groups[0].params.size(), 2u);
  ASSERT_EQ(groups[1].params.size(), 3u);
  EXPECT_EQ(groups[1].params[0].first, "h.0.ln_1.weight");
  EXPECT_EQ(weight_decay_param_groups({{"b", Tensor::zeros({3})}}, 0.1).size(), 1u);
}

}  // namespace
}  // namespace headroom
