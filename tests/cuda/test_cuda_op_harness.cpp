// Every case of the op harness (tests/ops/cases_*.cpp) on cuda:0 against the CPU, the oracle:
// the forward and the gradient of every differentiable input, in f32 and in each of the case's
// low-precision dtypes; and the GPU's allocations against a dry run of the same case on the meta
// device (one code path, Note [Kernel tables]). Skipped without a GPU.
#include "autograd/engine.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "cuda/cuda_test_support.h"
#include "memory/device_memory.h"
#include "ops/op_harness.h"
#include "ops/op_support.h"

namespace headroom::testing {
namespace {

// Note [CUDA op tolerances]
// The GPU and the CPU both accumulate in fp32, in different orders (tiled GEMMs, tree
// reductions, the online softmax), so their fp32 results differ by a few fp32 ulps: f32 takes
// rtol 1e-5. In bf16 / f16 both round that fp32 result once, and a few-ulp difference can move a
// value across a rounding boundary: one ulp of the dtype, at most 2^-7 of the value in bf16
// (rtol 1e-2) and 2^-10 in f16 (rtol 2e-3, two ulps), plus the case's own low_precision_rtol for
// ops that round intermediates. Values that cancel to near zero are bounded relative to the
// tensor's largest magnitude (atol_fraction). A gradient passes through at least the forward's
// roundings and sums over more terms (weight gradients over every row): twice the forward's.
// Where the GPU rounds an intermediate that the CPU keeps in fp32 (attention's P, before P V and
// dP, as FlashAttention), each output carries up to a unit roundoff of what it averages: the
// case's rounded_intermediate_units of the largest magnitude (u = 2^-8 in bf16, 2^-11 in f16).
// The first H200 run (bench/results/2026-11-28-gpu-check.md) failed attention without this term
// by differences of 1e-4..1e-2 of the largest magnitude.
// Hopper's FP8 tensor cores keep about 14 bits while they accumulate (DeepSeek-V3, 3.3.2): the
// FP8 cases' f32 results add gpu_accumulation_atol_fraction (2^-11) of the largest magnitude; the
// first H200 run failed the fp32 bound of these cases without it.
Tolerance forward_tolerance(const OpCase& c, DType dtype) {
  const double accumulation = c.gpu_accumulation_atol_fraction;
  switch (dtype) {
    case DType::bf16:
      return {1e-2 + c.low_precision_rtol,
              1e-5 + c.rounded_intermediate_units / 256.0 + accumulation};
    case DType::f16:
      return {2e-3 + c.low_precision_rtol,
              1e-5 + c.rounded_intermediate_units / 2048.0 + accumulation};
    default:
      return {1e-5, 1e-6 + accumulation};
  }
}

Tolerance gradient_tolerance(const OpCase& c, DType dtype) {
  const Tolerance f = forward_tolerance(c, dtype);
  return {2 * f.rtol, 10 * f.atol_fraction, c.gpu_gradient_atol};
}

// f32 first, then the case's low-precision dtypes.
std::vector<DType> case_dtypes(const OpCase& c) {
  std::vector<DType> dtypes{DType::f32};
  for (DType dtype : c.low_precision) dtypes.push_back(dtype);
  return dtypes;
}

class CudaOpHarness : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& op() const { return op_cases()[GetParam()]; }
};

// The same inputs (drawn on the CPU, copied) and the same output weights on both devices.
TEST_P(CudaOpHarness, MatchesTheCpu) {
  REQUIRE_GPU();
  const OpCase& c = op();
  for (DType dtype : case_dtypes(c)) {
    const std::string where = c.name + " in " + dtype_name(dtype);
    std::vector<Tensor> cpu_in = make_op_inputs(c, 41, dtype, kCPU, true);
    std::vector<Tensor> gpu_in = make_op_inputs(c, 41, dtype, kGpu, true);
    const Tensor cpu_out = c.fn(cpu_in);
    const Tensor gpu_out = c.fn(gpu_in);
    ASSERT_EQ(gpu_out.device(), kGpu) << where;
    ASSERT_EQ(gpu_out.dtype(), cpu_out.dtype()) << where;
    expect_close(gpu_out, cpu_out, forward_tolerance(c, dtype), where + ", forward");
    if (!cpu_out.requires_grad()) continue;
    ASSERT_TRUE(gpu_out.requires_grad()) << where;
    Generator gen(99);
    const Tensor weights =
        Tensor::randn(cpu_out.shape(), DType::f32, kCPU, &gen).to(cpu_out.dtype());
    backward(cpu_out, weights);
    backward(gpu_out, weights.to(kGpu));
    for (size_t j = 0; j < cpu_in.size(); ++j) {
      if (!cpu_in[j].requires_grad()) continue;
      const std::string input = where + ", gradient of input " + std::to_string(j);
      const Tensor expected = cpu_in[j].grad();
      const Tensor actual = gpu_in[j].grad();
      ASSERT_TRUE(actual.defined()) << input;
      EXPECT_EQ(actual.device(), kGpu) << input;
      EXPECT_EQ(actual.dtype(), expected.dtype()) << input;
      expect_close(actual, expected, gradient_tolerance(c, dtype), input);
    }
  }
}

// Peak growth of allocated bytes and the number of allocations over one forward and backward.
struct Allocations {
  int64_t peak_growth = 0;
  int64_t count = 0;
};

// One forward and backward first, on other inputs, so that what a backend keeps for the process
// (cuBLASLt's workspace, as PyTorch keeps cuBLAS's) exists before counting; the plan counts such
// memory in its CUDA overhead (Note [CUDA overhead per GPU family]), not in the dry run.
Allocations measure(const OpCase& c, DType dtype, Device device) {
  auto forward_backward = [&](const std::vector<Tensor>& inputs, const Tensor& grad_out) {
    Tensor out = c.fn(inputs);
    if (out.requires_grad()) backward(out, grad_out);
  };
  Tensor grad_out;
  {
    const std::vector<Tensor> warm_up = make_op_inputs(c, 5, dtype, device, true);
    {
      NoGradGuard no_grad;
      const Tensor probe = c.fn(warm_up);
      grad_out = Tensor::ones(probe.shape(), probe.dtype(), device);
    }
    forward_backward(warm_up, grad_out);
  }
  const std::vector<Tensor> inputs = make_op_inputs(c, 5, dtype, device, true);
  const int64_t before = static_cast<int64_t>(memory_allocated(device));
  const int64_t count_before = memory_stats(device).at("allocation.all.allocated");
  reset_peak_memory_stats(device);
  forward_backward(inputs, grad_out);
  return {static_cast<int64_t>(max_memory_allocated(device)) - before,
          memory_stats(device).at("allocation.all.allocated") - count_before};
}

TEST_P(CudaOpHarness, AllocatesAsTheMetaDryRun) {
  REQUIRE_GPU();
  const OpCase& c = op();
  for (DType dtype : case_dtypes(c)) {
    const Allocations gpu = measure(c, dtype, kGpu);
    Allocations meta;
    { meta = measure(c, dtype, kMeta); }
    EXPECT_EQ(gpu.peak_growth, meta.peak_growth)
        << c.name << " in " << dtype_name(dtype) << ": peak allocated bytes differ";
    EXPECT_EQ(gpu.count, meta.count)
        << c.name << " in " << dtype_name(dtype) << ": allocation counts differ";
  }
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  return op_case_test_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaOpHarness, ::testing::Range<size_t>(0, op_cases().size()),
                         case_name);

}  // namespace
}  // namespace headroom::testing
