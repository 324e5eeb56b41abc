// The op harness: the checks every case goes through on the CPU and the meta device.
//
// Note [Adding a backend to the op harness]
// A backend is added by running each case on its device next to the CPU and comparing outputs
// and gradients with the CPU's (the CPU is the oracle); see MetaMatchesCpu for the pattern, and
// tests/cuda/test_cuda_op_harness.cpp for CUDA.
#include "ops/op_harness.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "core/grad_mode.h"
#include "core/generator.h"
#include "memory/device_memory.h"

namespace headroom::testing {

namespace {

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

double norm(const std::vector<float>& a) { return std::sqrt(dot(a, a)); }

// sum(fn(inputs) * weights), in double.
double weighted_output(const OpCase& c, const std::vector<Tensor>& inputs,
                       const std::vector<float>& weights) {
  NoGradGuard no_grad;
  return dot(c.fn(inputs).to(DType::f32).to_float_vector(), weights);
}

class OpHarness : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& op() const { return op_cases()[GetParam()]; }
};

TEST_P(OpHarness, GradientMatchesFiniteDifferences) {
  const OpCase& c = op();
  std::vector<Tensor> inputs = make_op_inputs(c, 1234, DType::f32, kCPU, true);
  Tensor out = c.fn(inputs);
  ASSERT_TRUE(out.defined());
  if (!out.requires_grad()) GTEST_SKIP() << "no differentiable input";
  Generator gen(99);
  const Tensor weights = Tensor::randn(out.shape(), DType::f32, kCPU, &gen);
  backward(out, weights);
  const std::vector<float> w = weights.to_float_vector();
  Generator dir_gen(7);
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (!is_float_input(c.inputs[j]) || !c.inputs[j].differentiable) continue;
    const Tensor grad = inputs[j].grad();
    ASSERT_TRUE(grad.defined()) << "input " << j << " got no gradient";
    ASSERT_EQ(grad.shape(), inputs[j].shape());
    const std::vector<float> g = grad.to(DType::f32).to_float_vector();
    const std::vector<float> x = inputs[j].to_float_vector();
    const double typical = norm(g) / std::sqrt(static_cast<double>(std::max<size_t>(g.size(), 1)));
    auto check = [&](const std::vector<float>& v, const std::string& what) {
      std::vector<float> plus(x), minus(x);
      for (size_t i = 0; i < x.size(); ++i) {
        plus[i] = static_cast<float>(x[i] + c.fd_eps * v[i]);
        minus[i] = static_cast<float>(x[i] - c.fd_eps * v[i]);
      }
      std::vector<Tensor> in_plus = inputs, in_minus = inputs;
      in_plus[j] = Tensor::from_floats(plus, inputs[j].shape());
      in_minus[j] = Tensor::from_floats(minus, inputs[j].shape());
      const double fd =
          (weighted_output(c, in_plus, w) - weighted_output(c, in_minus, w)) / (2.0 * c.fd_eps);
      const double analytic = dot(g, v);
      const double tol = c.grad_rtol * (std::abs(analytic) + typical * norm(v)) + c.grad_atol;
      EXPECT_NEAR(fd, analytic, tol) << c.name << ": input " << j << ", " << what;
    };
    for (int d = 0; d < 3; ++d) {
      check(Tensor::randn(inputs[j].shape(), DType::f32, kCPU, &dir_gen).to_float_vector(),
            "random direction " + std::to_string(d));
    }
    if (x.size() <= 24) {
      for (size_t i = 0; i < x.size(); ++i) {
        std::vector<float> e(x.size(), 0.0f);
        e[i] = 1.0f;
        check(e, "element " + std::to_string(i));
      }
    }
  }
}

// Runs forward and backward; returns the output and the growth of peak allocated bytes and of
// the number of allocations while doing it.
struct RunFigures {
  Shape shape;
  DType dtype;
  int64_t peak_growth;
  int64_t allocations;
};

RunFigures run_and_measure(const OpCase& c, Device device) {
  std::vector<Tensor> inputs = make_op_inputs(c, 5, DType::f32, device, true);
  Tensor grad_out;
  {
    NoGradGuard no_grad;
    Tensor probe = c.fn(inputs);
    grad_out = Tensor::ones(probe.shape(), probe.dtype(), device);
  }
  const int64_t before = static_cast<int64_t>(memory_allocated(device));
  const int64_t count_before = memory_stats(device).at("allocation.all.allocated");
  reset_peak_memory_stats(device);
  RunFigures figures;
  {
    Tensor out = c.fn(inputs);
    figures.shape = out.shape();
    figures.dtype = out.dtype();
    if (out.requires_grad()) backward(out, grad_out);
  }
  figures.peak_growth = static_cast<int64_t>(max_memory_allocated(device)) - before;
  figures.allocations = memory_stats(device).at("allocation.all.allocated") - count_before;
  return figures;
}

TEST_P(OpHarness, MetaMatchesCpu) {
  const OpCase& c = op();
  const RunFigures cpu = run_and_measure(c, kCPU);
  const RunFigures meta = run_and_measure(c, kMeta);
  EXPECT_EQ(meta.shape, cpu.shape) << c.name;
  EXPECT_EQ(meta.dtype, cpu.dtype) << c.name;
  EXPECT_EQ(meta.peak_growth, cpu.peak_growth) << c.name << ": peak allocated bytes differ";
  EXPECT_EQ(meta.allocations, cpu.allocations) << c.name << ": allocation counts differ";
}

TEST_P(OpHarness, LowPrecisionIsFp32RoundedOnce) {
  const OpCase& c = op();
  if (c.low_precision.empty()) GTEST_SKIP() << "fp32 only";
  for (DType dtype : c.low_precision) {
    std::vector<Tensor> low = make_op_inputs(c, 77, dtype, kCPU, true);
    // The reference sees exactly the rounded inputs, in fp32.
    std::vector<Tensor> wide;
    for (const Tensor& t : low) wide.push_back(is_floating(t.dtype()) ? t.to(DType::f32) : t);
    Tensor out_low = c.fn(low);
    Tensor out_ref;
    {
      NoGradGuard no_grad;
      out_ref = c.fn(wide);
    }
    ASSERT_EQ(out_low.shape(), out_ref.shape()) << c.name;
    const std::vector<float> a = out_low.to(DType::f32).to_float_vector();
    const std::vector<float> b = out_ref.to_float_vector();
    const double ulp = dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    double largest = 0.0;
    for (float v : b) largest = std::max(largest, static_cast<double>(std::abs(v)));
    for (size_t i = 0; i < a.size(); ++i) {
      const double tol = (ulp + c.low_precision_rtol) * std::abs(b[i]) +
                         (1e-6 + c.rounded_intermediate_units * ulp / 2) * largest +
                         (out_low.dtype() == DType::f32 ? 0.0 : 1e-7);
      ASSERT_NEAR(a[i], b[i], tol) << c.name << " in " << dtype_name(dtype) << ", element " << i;
    }
    if (out_low.requires_grad()) {
      backward(out_low, Tensor::ones(out_low.shape(), out_low.dtype()));
      for (size_t j = 0; j < low.size(); ++j) {
        if (low[j].requires_grad()) {
          ASSERT_TRUE(low[j].grad().defined()) << c.name << ": input " << j;
          EXPECT_EQ(low[j].grad().dtype(), dtype) << c.name << ": input " << j;
        }
      }
    }
  }
}

TEST_P(OpHarness, RepeatsBitForBit) {
  const OpCase& c = op();
  auto run = [&] {
    std::vector<Tensor> inputs = make_op_inputs(c, 31, DType::f32, kCPU, true);
    Tensor out = c.fn(inputs);
    std::vector<std::vector<float>> values{out.to_float_vector()};
    if (out.requires_grad()) {
      backward(out, Tensor::ones(out.shape()));
      for (const Tensor& t : inputs) {
        if (t.requires_grad()) values.push_back(t.grad().to_float_vector());
      }
    }
    return values;
  };
  EXPECT_EQ(run(), run()) << c.name;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  return op_case_test_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpHarness, ::testing::Range<size_t>(0, op_cases().size()), case_name);

}  // namespace

}  // namespace headroom::testing
