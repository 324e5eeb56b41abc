// GradScaler against torch's GradScaler and Megatron's DynamicGradScaler
// (tests/fixtures/amp/grad_scaler_golden.txt, written by tools/gen_grad_scaler_golden.py), bit
// for bit, and its errors, state_dict, disabled / static modes, gradient dtypes and meta device.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/grad_scaler.h"
#include "autograd/engine.h"
#include "core/error.h"
#include "core/kernel_census.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "optim/adamw.h"
#include "optim/golden_lines.h"

namespace headroom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// torch.optim.SGD without momentum (p += -lr * g) on f32 parameters, with gradients of any
// floating dtype. The tests use a power-of-two lr, so each update rounds once however it is done.
class TinySgd final : public Optimizer {
 public:
  TinySgd(const std::vector<std::vector<Tensor>>& groups, double lr) {
    for (const std::vector<Tensor>& params : groups) {
      ParamGroup group{.lr = lr, .weight_decay = 0.0};
      for (size_t i = 0; i < params.size(); ++i) {
        group.params.emplace_back(std::to_string(groups_.size()) + "." + std::to_string(i),
                                  params[i]);
      }
      groups_.push_back(group);
    }
  }

  void step() override {
    ++steps_;
    for (const ParamGroup& group : groups_) {
      const float lr = static_cast<float>(*group.lr);
      for (const auto& [name, param] : group.params) {
        const Tensor grad = param.grad();
        if (!grad.defined() || param.device().is_meta()) continue;
        const std::vector<float> g = grad.to_float_vector();
        float* p = param.data<float>();
        for (size_t i = 0; i < g.size(); ++i) p[i] += -lr * g[i];
      }
    }
  }
  std::string name() const override { return "sgd"; }
  int steps() const { return steps_; }

 private:
  int steps_ = 0;
};

Tensor leaf(const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::from_floats(values, shape);
  t.set_requires_grad(true);
  return t;
}

// The same float, NaN matching any NaN.
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

void expect_same(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(same(got[i], want[i])) << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
}

template <typename E>
void expect_error(const std::function<void()>& fn, const std::string& message) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected: " << message;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

using optim_test::read_floats;

// The fixture, as its generator's docstring describes it.
struct Golden {
  struct Result {
    float scale_before, scale_after;
    int found_inf, stepped;
    int64_t growth_tracker;
  };
  struct MegatronStep {
    int found_inf;
    float scale_before, scale_after;
    int64_t growth_tracker, hysteresis_tracker;
  };
  struct Cast {
    DType dtype;
    double scale;
    float inv_scale;
    std::vector<float> scaled, unscaled;
  };
  GradScalerOptions torch_options, megatron_options;
  double lr = 0.0;
  std::map<std::string, std::vector<float>> init;
  std::map<std::pair<int, std::string>, std::vector<float>> coeffs, grads, values;
  std::set<int> unscale_first;
  std::map<int, double> new_scale;
  std::map<int, Result> results;
  std::map<int, MegatronStep> megatron;
  std::vector<Cast> casts;
};

const Golden& golden() {
  static const Golden g = [] {
    Golden g;
    const std::string path = std::string(HEADROOM_FIXTURES_DIR) + "/amp/grad_scaler_golden.txt";
    std::ifstream file(path);
    EXPECT_TRUE(file) << "cannot open " << path;
    std::string line;
    while (std::getline(file, line)) {
      std::istringstream in(line);
      std::string kind, name;
      int step = 0;
      in >> kind;
      if (kind == "options") {
        GradScalerOptions& o = g.torch_options;
        in >> o.init_scale >> o.growth_factor >> o.backoff_factor >> o.growth_interval >> g.lr;
      } else if (kind == "init") {
        in >> name;
        g.init[name] = read_floats(in);
      } else if (kind == "coeff" || kind == "grad" || kind == "value") {
        in >> step >> name;
        auto& table = kind == "coeff" ? g.coeffs : kind == "grad" ? g.grads : g.values;
        table[{step, name}] = read_floats(in);
      } else if (kind == "unscale_first") {
        in >> step;
        g.unscale_first.insert(step);
      } else if (kind == "new_scale") {
        in >> step;
        in >> g.new_scale[step];
      } else if (kind == "result") {
        Golden::Result r;
        in >> step >> r.scale_before >> r.found_inf >> r.stepped >> r.scale_after >>
            r.growth_tracker;
        g.results[step] = r;
      } else if (kind == "megatron_options") {
        GradScalerOptions& o = g.megatron_options;
        in >> o.init_scale >> o.min_scale >> o.growth_factor >> o.backoff_factor >>
            o.growth_interval >> o.hysteresis;
      } else if (kind == "megatron") {
        Golden::MegatronStep m;
        in >> step >> m.found_inf >> m.scale_before >> m.scale_after >> m.growth_tracker >>
            m.hysteresis_tracker;
        g.megatron[step] = m;
      } else if (kind == "cast") {
        Golden::Cast c;
        std::string dtype;
        size_t n = 0;
        in >> dtype >> c.scale >> c.inv_scale >> n;
        c.dtype = dtype_from_name(dtype);
        std::vector<float> values = read_floats(in);
        EXPECT_EQ(values.size(), 2 * n) << line;
        c.scaled.assign(values.begin(), values.begin() + n);
        c.unscaled.assign(values.begin() + n, values.end());
        g.casts.push_back(c);
      }
    }
    return g;
  }();
  return g;
}

TEST(GradScaler, MatchesTorchGolden) {
  const Golden& g = golden();
  ASSERT_EQ(g.results.size(), 40u);
  std::map<std::string, Tensor> params = {{"w", leaf(g.init.at("w"), {2, 3})},
                                          {"b", leaf(g.init.at("b"), {4})}};
  TinySgd optimizer({{params["w"]}, {params["b"]}}, g.lr);
  GradScaler scaler(g.torch_options);
  int skipped = 0;
  for (const auto& [step, want] : g.results) {
    const std::string at = " at step " + std::to_string(step);
    optimizer.zero_grad();
    EXPECT_TRUE(same(scaler.get_scale(), want.scale_before)) << scaler.get_scale() << at;
    Tensor loss;
    for (const std::string name : {"w", "b"}) {
      auto coeff = g.coeffs.find({step, name});
      if (coeff == g.coeffs.end()) continue;
      const Tensor term =
          sum(mul(params[name], Tensor::from_floats(coeff->second, params[name].shape())));
      loss = loss.defined() ? add(loss, term) : term;
    }
    backward(scaler.scale(loss));
    if (g.unscale_first.count(step)) scaler.unscale_(optimizer);
    const bool stepped = scaler.step(optimizer);
    EXPECT_EQ(stepped, want.stepped == 1) << at;
    EXPECT_EQ(scaler.found_inf(optimizer), want.found_inf == 1) << at;
    skipped += !stepped;
    if (auto it = g.new_scale.find(step); it != g.new_scale.end()) {
      scaler.update(it->second);
    } else {
      scaler.update();
    }
    EXPECT_TRUE(same(scaler.get_scale(), want.scale_after))
        << scaler.get_scale() << " vs " << want.scale_after << at;
    EXPECT_EQ(scaler.growth_tracker(), want.growth_tracker) << at;
    for (const auto& [name, param] : params) {
      if (auto grad = g.grads.find({step, name}); grad != g.grads.end()) {
        ASSERT_TRUE(param.grad().defined()) << name << at;
        expect_same(param.grad().to_float_vector(), grad->second, "grad " + name + at);
      } else {
        EXPECT_FALSE(param.grad().defined()) << name << at;
      }
      expect_same(param.to_float_vector(), g.values.at({step, name}), "value " + name + at);
    }
  }
  EXPECT_EQ(skipped, 7);
  EXPECT_EQ(optimizer.steps(), 33);
}

TEST(GradScaler, MatchesMegatronHysteresisGolden) {
  const Golden& g = golden();
  ASSERT_EQ(g.megatron.size(), 30u);
  EXPECT_EQ(g.megatron_options.hysteresis, 2);
  Tensor p = leaf({0.5f, -1.5f}, {2});
  TinySgd optimizer({{p}}, 0.25);
  GradScaler scaler(g.megatron_options);
  for (const auto& [step, want] : g.megatron) {
    const std::string at = " at step " + std::to_string(step);
    optimizer.zero_grad();
    EXPECT_TRUE(same(scaler.get_scale(), want.scale_before)) << scaler.get_scale() << at;
    const float c = want.found_inf ? kInf : 0.75f;
    backward(scaler.scale(sum(mul(p, Tensor::from_floats({0.5f, c}, {2})))));
    EXPECT_EQ(scaler.step(optimizer), want.found_inf == 0) << at;
    scaler.update();
    EXPECT_TRUE(same(scaler.get_scale(), want.scale_after))
        << scaler.get_scale() << " vs " << want.scale_after << at;
    EXPECT_EQ(scaler.growth_tracker(), want.growth_tracker) << at;
    EXPECT_EQ(scaler.hysteresis_tracker(), want.hysteresis_tracker) << at;
  }
}

TEST(GradScaler, UnscaleMatchesTorchInEachGradientDtype) {
  const Golden& g = golden();
  ASSERT_EQ(g.casts.size(), 9u);
  for (const Golden::Cast& c : g.casts) {
    const std::string what = str_cat(dtype_name(c.dtype), " at scale ", c.scale);
    const int64_t n = static_cast<int64_t>(c.scaled.size());
    Tensor p = Tensor::zeros({n}).set_requires_grad(true);
    const Tensor grad = Tensor::from_floats(c.scaled, {n}, c.dtype);
    expect_same(grad.to_float_vector(), c.scaled, what + ": the fixture's scaled values");
    p.set_grad(grad);
    TinySgd optimizer({{p}}, 1.0);
    GradScaler scaler({.init_scale = c.scale, .allow_fp16_grads = true});
    EXPECT_TRUE(
        same(static_cast<float>(1.0 / static_cast<double>(scaler.get_scale())), c.inv_scale))
        << what;
    scaler.scale(Tensor::ones({}));
    scaler.unscale_(optimizer);
    EXPECT_FALSE(scaler.found_inf(optimizer)) << what;
    EXPECT_EQ(p.grad().dtype(), c.dtype);
    expect_same(p.grad().to_float_vector(), c.unscaled, what);
  }
}

// Note [Tensor lists] (backend/kernel_table.h): 300 gradients are unscaled in two launches into
// one flag, and an inf in the second slice is found.
TEST(GradScaler, UnscalesListsLongerThanOneLaunch) {
  std::vector<Tensor> params;
  for (int i = 0; i < 300; ++i) {
    Tensor p = Tensor::zeros({3}).set_requires_grad(true);
    p.set_grad(Tensor::from_floats({4.0f, -8.0f, i == 280 ? kInf : 2.0f}, {3}));
    params.push_back(p);
  }
  TinySgd optimizer({params}, 1.0);
  GradScaler scaler({.init_scale = 4.0});
  scaler.scale(Tensor::ones({}));
  KernelCensus census;
  {
    KernelCensusScope scope(census);
    scaler.unscale_(optimizer);
  }
  int launches = 0;
  for (const KernelLaunch& l : census.launches()) {
    launches += std::string(l.entry) == "unscale_and_check";
  }
  EXPECT_EQ(launches, 2);
  EXPECT_TRUE(scaler.found_inf(optimizer));
  EXPECT_EQ(params[0].grad().to_float_vector(), (std::vector<float>{1.0f, -2.0f, 0.5f}));
  EXPECT_EQ(params[299].grad().to_float_vector(), (std::vector<float>{1.0f, -2.0f, 0.5f}));
}

TEST(GradScaler, DefaultsAreTorchsAndMegatronExtrasAreOff) {
  const GradScalerOptions o;
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.growth_factor, 2.0);
  EXPECT_EQ(o.backoff_factor, 0.5);
  EXPECT_EQ(o.growth_interval, 2000);
  EXPECT_TRUE(o.enabled);
  EXPECT_EQ(o.hysteresis, 1);
  EXPECT_EQ(o.min_scale, 0.0);
  EXPECT_TRUE(o.dynamic);
  EXPECT_FALSE(o.allow_fp16_grads);
  const GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_TRUE(scaler.is_enabled());
}

TEST(GradScaler, RejectsWhatTorchAndMegatronReject) {
  EXPECT_THROW(GradScaler({.growth_factor = 1.0}), ValueError);
  EXPECT_THROW(GradScaler({.backoff_factor = 1.0}), ValueError);
  EXPECT_THROW(GradScaler({.hysteresis = 0}), ValueError);
  EXPECT_THROW(GradScaler({.min_scale = -1.0}), ValueError);
  EXPECT_THROW(GradScaler({.init_scale = 8.0, .min_scale = 16.0}), ValueError);
  // torch checks nothing when disabled.
  EXPECT_NO_THROW(GradScaler({.growth_factor = 0.5, .enabled = false}));
}

TEST(GradScaler, ErrorsAreTorchs) {
  Tensor p = leaf({1.0f, 2.0f}, {2});
  TinySgd optimizer({{p}}, 0.5);
  GradScaler scaler;
  expect_error<Error>([&] { scaler.unscale_(optimizer); },
                      "Attempted unscale_ but the scale is not initialized.  This may indicate "
                      "your script did not use scaler.scale(loss or outputs) earlier in the "
                      "iteration.");
  expect_error<Error>([&] { scaler.step(optimizer); },
                      "Attempted step but the scale is not initialized.  This may indicate your "
                      "script did not use scaler.scale(loss or outputs) earlier in the "
                      "iteration.");
  backward(scaler.scale(sum(p)));

  scaler.unscale_(optimizer);
  expect_error<Error>([&] { scaler.unscale_(optimizer); },
                      "unscale_() has already been called on this optimizer since the last "
                      "update().");
  EXPECT_TRUE(scaler.step(optimizer));
  expect_error<Error>([&] { scaler.unscale_(optimizer); },
                      "unscale_() is being called after step().");
  expect_error<Error>([&] { scaler.step(optimizer); },
                      "step() has already been called since the last update().");
  scaler.update();

  // After update() the optimizer is ready again.
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();

  expect_error<Error>([&] { scaler.update(); }, "No inf checks were recorded prior to update.");
  optimizer.zero_grad();
  expect_error<Error>([&] { scaler.step(optimizer); },
                      "No inf checks were recorded for this optimizer.");
}

TEST(GradScaler, Fp16GradientsAreRefusedAsTorchRefusesThemUnlessAllowed) {
  Tensor a = leaf({1.0f, 2.0f}, {2}), b = leaf({3.0f}, {1});
  a.set_grad(Tensor::from_floats({4.0f, 8.0f}, {2}));
  b.set_grad(Tensor::from_floats({16.0f}, {1}, DType::f16));
  TinySgd optimizer({{a, b}}, 0.5);
  GradScaler scaler({.init_scale = 4.0});
  scaler.scale(Tensor::ones({}));
  expect_error<ValueError>([&] { scaler.unscale_(optimizer); },
                           "Attempting to unscale FP16 gradients.");
  // Nothing was touched, and the optimizer can still be unscaled.
  EXPECT_EQ(a.grad().to_float_vector(), (std::vector<float>{4.0f, 8.0f}));
  b.set_grad(Tensor::from_floats({16.0f}, {1}, DType::bf16));
  scaler.unscale_(optimizer);
  EXPECT_EQ(a.grad().to_float_vector(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(b.grad().to_float_vector(), (std::vector<float>{4.0f}));

  GradScaler allowing({.init_scale = 4.0, .allow_fp16_grads = true});
  allowing.scale(Tensor::ones({}));
  b.set_grad(Tensor::from_floats({16.0f}, {1}, DType::f16));
  allowing.unscale_(optimizer);
  EXPECT_EQ(b.grad().dtype(), DType::f16);
  EXPECT_EQ(b.grad().to_float_vector(), (std::vector<float>{4.0f}));
}

TEST(GradScaler, OtherGradientDtypesAreNotImplemented) {
  Tensor p = leaf({1.0f}, {1});
  p.set_grad(Tensor::from_floats({1.0f}, {1}, DType::f8_e4m3fn));
  TinySgd optimizer({{p}}, 0.5);
  GradScaler scaler;
  scaler.scale(Tensor::ones({}));
  EXPECT_THROW(scaler.unscale_(optimizer), NotImplementedError);
}

TEST(GradScaler, FindsInfAndNaNInEveryGradientDtype) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (float bad : {kInf, -kInf, kNaN}) {
      Tensor p = Tensor::zeros({3}).set_requires_grad(true);
      p.set_grad(Tensor::from_floats({2.0f, bad, -6.0f}, {3}, dtype));
      TinySgd optimizer({{p}}, 1.0);
      GradScaler scaler({.init_scale = 2.0, .allow_fp16_grads = true});
      scaler.scale(Tensor::ones({}));
      EXPECT_FALSE(scaler.step(optimizer)) << dtype_name(dtype) << " " << bad;
      EXPECT_TRUE(scaler.found_inf(optimizer));
      EXPECT_EQ(optimizer.steps(), 0);
      expect_same(p.grad().to_float_vector(), {1.0f, bad, -3.0f}, dtype_name(dtype));
      scaler.update();
      EXPECT_EQ(scaler.get_scale(), 1.0f);
    }
  }
}

TEST(GradScaler, OverflowOfTheProductIsNotReportedAsTorchChecksTheInput) {
  Tensor p = leaf({0.0f}, {1});
  p.set_grad(Tensor::from_floats({3e38f}, {1}));
  TinySgd optimizer({{p}}, 1.0);
  GradScaler scaler({.init_scale = 0.5});
  scaler.scale(Tensor::ones({}));
  EXPECT_TRUE(scaler.step(optimizer));
  EXPECT_EQ(p.grad().to_float_vector(), (std::vector<float>{kInf}));
}

TEST(GradScaler, LargeGradientsTakeTheThreadedPath) {
  const int64_t n = 3 * (1 << 16) + 7;
  const Tensor scaled = Tensor::randn({n});
  const float scale = 1000.3f;
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale));
  std::vector<float> want = scaled.to_float_vector();
  for (float& v : want) v *= inv_scale;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 4}) {
    omp_set_num_threads(threads);
    for (int64_t bad_at : {int64_t{-1}, n - 1, n / 2}) {
      Tensor p = Tensor::zeros({n}).set_requires_grad(true);
      p.set_grad(scaled.clone());
      if (bad_at >= 0) p.grad().data<float>()[bad_at] = kNaN;
      TinySgd optimizer({{p}}, 1.0);
      GradScaler scaler({.init_scale = scale});
      scaler.scale(Tensor::ones({}));
      scaler.unscale_(optimizer);
      EXPECT_EQ(scaler.found_inf(optimizer), bad_at >= 0) << threads << " threads, " << bad_at;
      std::vector<float> expected = want;
      if (bad_at >= 0) expected[bad_at] = kNaN;
      expect_same(p.grad().to_float_vector(), expected, "threaded unscale");
    }
  }
  omp_set_num_threads(saved);
}

TEST(GradScaler, ScaleMultipliesTheLossInFp32AndBackpropagatesTheScale) {
  GradScaler scaler({.init_scale = 3000.7});
  const float s = scaler.get_scale();
  Tensor p = leaf({0.1f, -0.2f, 0.3f}, {3});
  const Tensor loss = sum(mul(p, p));
  const Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.dtype(), DType::f32);
  EXPECT_EQ(scaled.ndim(), 0);
  EXPECT_EQ(scaled.item(), static_cast<double>(static_cast<float>(loss.item()) * s));
  backward(scaled);
  const std::vector<float> got = p.grad().to_float_vector();
  const std::vector<float> p_values = p.to_float_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i] / s, 2.0f * p_values[i]);

  // torch's promotion: a 0-dim bf16 loss times the 0-dim fp32 scale is fp32; a larger one stays.
  const Tensor scalar_bf16 = Tensor::full({}, 1.5, DType::bf16);
  EXPECT_EQ(scaler.scale(scalar_bf16).dtype(), DType::f32);
  EXPECT_EQ(scaler.scale(scalar_bf16).item(), static_cast<double>(1.5f * s));
  const Tensor vector_bf16 = Tensor::full({2}, 1.5, DType::bf16);
  EXPECT_EQ(scaler.scale(vector_bf16).dtype(), DType::bf16);
  EXPECT_EQ(scaler.scale(vector_bf16).to_float_vector()[0], static_cast<float>(BFloat16(1.5f * s)));
  EXPECT_THROW(scaler.scale(Tensor::from_ints({1}, {1})), ValueError);
}

TEST(GradScaler, ScaleGrowsOnlyWhileFinite) {
  GradScaler scaler({.init_scale = 0x1p127, .growth_interval = 1});
  Tensor p = leaf({1.0f}, {1});
  TinySgd optimizer({{p}}, 1.0);
  backward(scaler.scale(sum(p)));
  scaler.step(optimizer);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 0x1p127f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, EachOptimizerSkipsOnItsOwnInfAndTheScaleBacksOffOnce) {
  Tensor a = leaf({1.0f}, {1}), b = leaf({1.0f}, {1});
  TinySgd first({{a}}, 1.0), second({{b}}, 1.0);
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 1});
  scaler.scale(Tensor::ones({}));
  a.set_grad(Tensor::from_floats({8.0f}, {1}));
  b.set_grad(Tensor::from_floats({kInf}, {1}));
  EXPECT_TRUE(scaler.step(first));
  EXPECT_FALSE(scaler.step(second));
  EXPECT_EQ(a.to_float_vector()[0], 0.0f);
  EXPECT_EQ(b.to_float_vector()[0], 1.0f);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 4.0f);
  // update() forgot both: each can be stepped again.
  b.set_grad(Tensor::from_floats({4.0f}, {1}));
  EXPECT_TRUE(scaler.step(second));
  EXPECT_FALSE(scaler.found_inf(second));
}

TEST(GradScaler, ASkippedStepLeavesAdamWUntouched) {
  Tensor p = leaf({1.0f, -1.0f}, {2});
  AdamW optimizer({p});
  GradScaler scaler({.init_scale = 1024.0});
  backward(scaler.scale(sum(mul(p, Tensor::from_floats({kNaN, 1.0f}, {2})))));
  EXPECT_FALSE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(p.to_float_vector(), (std::vector<float>{1.0f, -1.0f}));
  EXPECT_EQ(optimizer.state(0, 0).step, 0);
  EXPECT_EQ(scaler.get_scale(), 512.0f);

  optimizer.zero_grad();
  backward(scaler.scale(sum(mul(p, Tensor::from_floats({0.5f, 1.0f}, {2})))));
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(optimizer.state(0, 0).step, 1);
  // The first AdamW step moves each element by lr against the sign of its (unscaled) gradient.
  EXPECT_NEAR(p.to_float_vector()[0], 1.0f * (1 - 1e-5f) - 1e-3f, 1e-6);
}

// What a dry run on the meta device uses to plan a step that overflows (plan/).
TEST(GradScaler, RecordedOverflowSkipsTheStepAndBacksOff) {
  Tensor p = leaf({1.0f, -1.0f}, {2});
  AdamW optimizer({p});
  GradScaler scaler({.init_scale = 1024.0});
  backward(scaler.scale(sum(p)));
  EXPECT_THROW(scaler.record_overflow(optimizer), Error);  // nothing unscaled yet
  scaler.unscale_(optimizer);
  EXPECT_FALSE(scaler.found_inf(optimizer));
  scaler.record_overflow(optimizer);
  EXPECT_TRUE(scaler.found_inf(optimizer));
  EXPECT_FALSE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(optimizer.state(0, 0).step, 0);
  EXPECT_EQ(p.to_float_vector(), (std::vector<float>{1.0f, -1.0f}));
  EXPECT_EQ(scaler.get_scale(), 512.0f);
  GradScaler disabled({.enabled = false});
  disabled.record_overflow(optimizer);  // does nothing
}

TEST(GradScaler, DisabledPassesEverythingThrough) {
  GradScaler scaler({.enabled = false});
  EXPECT_FALSE(scaler.is_enabled());
  Tensor p = leaf({1.0f}, {1});
  const Tensor loss = sum(mul(p, Tensor::from_floats({kInf}, {1})));
  const Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.storage(), loss.storage());
  backward(scaled);
  TinySgd optimizer({{p}}, 1.0);
  scaler.unscale_(optimizer);
  EXPECT_TRUE(scaler.step(optimizer));  // no check: the optimizer steps, inf and all
  EXPECT_EQ(optimizer.steps(), 1);
  scaler.update();
  scaler.update(5.0);
  EXPECT_EQ(scaler.get_scale(), 1.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_TRUE(scaler.state_dict().empty());
  scaler.load_state_dict(nlohmann::json::object());
}

TEST(GradScaler, StaticScaleNeverChangesButStillSkips) {
  GradScaler scaler({.init_scale = 128.0, .growth_interval = 2, .dynamic = false});
  Tensor p = leaf({1.0f}, {1});
  TinySgd optimizer({{p}}, 1.0);
  for (float c : {1.0f, 1.0f, 1.0f, kInf, kNaN, 1.0f, 1.0f}) {
    optimizer.zero_grad();
    backward(scaler.scale(sum(mul(p, Tensor::from_floats({c}, {1})))));
    EXPECT_EQ(scaler.step(optimizer), std::isfinite(c));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 128.0f);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
  EXPECT_EQ(optimizer.steps(), 5);
  EXPECT_EQ(p.grad().to_float_vector(), (std::vector<float>{1.0f}));
  scaler.scale(Tensor::ones({}));
  scaler.update(64.0);
  EXPECT_EQ(scaler.get_scale(), 64.0f);
}

TEST(GradScaler, ScaleOfOneLeavesGradientsUntouchedEvenSubnormalOnes) {
  // inv_scale == 1 skips the multiply, as torch does; a multiply under flush-to-zero would zero
  // the subnormal.
  const float subnormal = 1e-40f;
  Tensor p = leaf({0.0f, 0.0f}, {2});
  p.set_grad(Tensor::from_floats({subnormal, -3.0f}, {2}));
  TinySgd optimizer({{p}}, 1.0);
  GradScaler scaler({.init_scale = 1.0, .dynamic = false});
  scaler.scale(Tensor::ones({}));
  scaler.unscale_(optimizer);
  expect_same(p.grad().to_float_vector(), {subnormal, -3.0f}, "grad");
}

TEST(GradScaler, MinScaleIsTheFloorOfABackoff) {
  GradScaler scaler({.init_scale = 4.0, .min_scale = 3.0});
  Tensor p = leaf({1.0f}, {1});
  TinySgd optimizer({{p}}, 1.0);
  scaler.scale(Tensor::ones({}));
  p.set_grad(Tensor::from_floats({kInf}, {1}));
  scaler.step(optimizer);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 3.0f);
}

TEST(GradScaler, NonContiguousGradientsAreUnscaledInPlace) {
  Tensor p = Tensor::zeros({3, 2}).set_requires_grad(true);
  p.set_grad(Tensor::from_floats({2, 4, 6, 8, 10, 12}, {2, 3}).transpose(0, 1));
  ASSERT_FALSE(p.grad().is_contiguous());
  const Tensor grad = p.grad();
  TinySgd optimizer({{p}}, 1.0);
  GradScaler scaler({.init_scale = 2.0});
  scaler.scale(Tensor::ones({}));
  scaler.unscale_(optimizer);
  EXPECT_EQ(grad.to_float_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(GradScaler, MetaDeviceComputesNothingAndFindsNoInf) {
  Tensor p = Tensor::empty({64, 32}, DType::f32, kMeta).set_requires_grad(true);
  AdamW optimizer({p});
  GradScaler scaler;
  const Tensor loss = sum(mul(p, p));
  const Tensor scaled = scaler.scale(loss);
  EXPECT_TRUE(scaled.device().is_meta());
  backward(scaled);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_TRUE(scaler.step(optimizer));
  EXPECT_FALSE(scaler.found_inf(optimizer));
  scaler.update();
  EXPECT_EQ(optimizer.state(0, 0).step, 1);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, StateDictHasTorchsKeysAndRoundTrips) {
  GradScaler scaler({.init_scale = 1000.0, .growth_interval = 5});
  Tensor p = leaf({1.0f}, {1});
  TinySgd optimizer({{p}}, 1.0);
  for (float c : {1.0f, kInf, 1.0f, 1.0f}) {
    optimizer.zero_grad();
    backward(scaler.scale(sum(mul(p, Tensor::from_floats({c}, {1})))));
    scaler.step(optimizer);
    scaler.update();
  }
  const nlohmann::json state = scaler.state_dict();
  EXPECT_EQ(state, nlohmann::json::parse(R"({"scale": 500.0, "growth_factor": 2.0,
      "backoff_factor": 0.5, "growth_interval": 5, "_growth_tracker": 2})"));

  GradScaler restored;
  restored.load_state_dict(nlohmann::json::parse(state.dump()));
  EXPECT_EQ(restored.get_scale(), 500.0f);
  EXPECT_EQ(restored.growth_tracker(), 2);
  EXPECT_EQ(restored.options().growth_interval, 5);
  EXPECT_EQ(restored.state_dict(), state);
  // Three more clean steps grow both the same way.
  for (GradScaler* s : {&scaler, &restored}) {
    s->scale(Tensor::ones({}));
    for (int i = 0; i < 3; ++i) {
      optimizer.zero_grad();
      p.set_grad(Tensor::ones({1}));
      s->step(optimizer);
      s->update();
    }
  }
  EXPECT_EQ(restored.get_scale(), 1000.0f);
  EXPECT_EQ(restored.state_dict(), scaler.state_dict());
}

TEST(GradScaler, StateDictCarriesTheExtrasOnlyWhenUsed) {
  GradScaler megatron({.init_scale = 4096.0, .hysteresis = 2, .min_scale = 1.0});
  const nlohmann::json state = megatron.state_dict();
  EXPECT_EQ(state.at("hysteresis"), 2);
  EXPECT_EQ(state.at("_hysteresis_tracker"), 2);
  EXPECT_EQ(state.at("min_scale"), 1.0);
  EXPECT_FALSE(state.contains("dynamic"));
  GradScaler restored;
  restored.load_state_dict(state);
  EXPECT_EQ(restored.options().hysteresis, 2);
  EXPECT_EQ(restored.options().min_scale, 1.0);
  EXPECT_EQ(restored.state_dict(), state);

  const nlohmann::json fixed = GradScaler({.dynamic = false}).state_dict();
  EXPECT_EQ(fixed.at("dynamic"), false);
  EXPECT_EQ(fixed.size(), 6u);
  // A state without the extras is torch's: loading it turns them off.
  restored.load_state_dict(GradScaler().state_dict());
  EXPECT_EQ(restored.options().hysteresis, 1);
  EXPECT_EQ(restored.options().min_scale, 0.0);
  EXPECT_EQ(restored.state_dict().size(), 5u);
}

TEST(GradScaler, LoadStateDictRejectsBadStatesAndChangesNothing) {
  GradScaler scaler;
  expect_error<Error>([&] { scaler.load_state_dict(nlohmann::json::object()); },
                      "The source state dict is empty, possibly because it was saved from a "
                      "disabled instance of GradScaler.");
  nlohmann::json state = GradScaler({.init_scale = 2.0}).state_dict();
  state.erase("_growth_tracker");
  expect_error<ValueError>([&] { scaler.load_state_dict(state); },
                           "GradScaler.load_state_dict: missing key '_growth_tracker'");
  state["_growth_tracker"] = "3";
  EXPECT_THROW(scaler.load_state_dict(state), ValueError);
  state["_growth_tracker"] = 3;
  state["growth_factor"] = 0.9;
  EXPECT_THROW(scaler.load_state_dict(state), ValueError);
  EXPECT_EQ(scaler.get_scale(), 65536.0f);
  EXPECT_EQ(scaler.options().growth_factor, 2.0);
}

// A saved state is checked as the constructor checks its options (issue 19): a scale of 0, a
// negative one or one past fp32's range would skip every fp16 step; the trackers must lie in
// their intervals.
TEST(GradScaler, LoadStateDictChecksEveryFieldAsTheConstructorDoes) {
  const nlohmann::json good = GradScaler({.init_scale = 2.0}).state_dict();
  GradScaler scaler;
  auto expect_refused = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json state = good;
    state[key] = value;
    EXPECT_THROW(scaler.load_state_dict(state), ValueError) << key << " " << value.dump();
  };
  for (double scale : {0.0, -65536.0, 1e300}) expect_refused("scale", scale);
  expect_refused("growth_interval", 0);
  expect_refused("_growth_tracker", -1);
  expect_refused("_growth_tracker", 2000);  // growth_interval is 2000
  expect_refused("growth_factor", std::numeric_limits<double>::infinity());
  expect_refused("backoff_factor", 0.0);
  for (double scale : {0.0, -1.0, 1e39}) {
    EXPECT_THROW(GradScaler({.init_scale = scale}), ValueError) << scale;
  }
  EXPECT_EQ(scaler.get_scale(), 65536.0f);
  scaler.load_state_dict(good);
  EXPECT_EQ(scaler.get_scale(), 2.0f);
}

}  // namespace
}  // namespace headroom
