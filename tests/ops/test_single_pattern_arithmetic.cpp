// One code path for the element-wise ops and the reductions (issue 17): a real CPU run of each,
// forward and backward, in f32, bf16 and f16, allocates exactly what the meta device's dry run
// plans, whichever device the dry run stands in for; bf16 / f16 results are the fp32 result
// rounded once, with no fp32 copy of any input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "backend/reduction_kernels.h"
#include "core/dtype_convert.h"
#include "ops/device_peak.h"
#include "ops/ops.h"

namespace headroom {
namespace {

constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// Values that are exact in every dtype here, spread so that sums are not trivially round.
Tensor ramp(const Shape& shape, DType dtype, Device device, double step = 0.125) {
  std::vector<float> values(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>((static_cast<int64_t>(i % 23) - 11) * step);
  }
  return Tensor::from_floats(values, shape).to(dtype).to(device);
}

// The forward's and the backward's peak growth of op(a, b) on `device`, both inputs leaves.
std::pair<int64_t, int64_t> peaks_of(
    Device device, const Shape& a_shape, const Shape& b_shape, DType dtype,
    const std::function<Tensor(const Tensor&, const Tensor&)>& op) {
  Tensor a = ramp(a_shape, dtype, kCPU).to(device);
  Tensor b = ramp(b_shape, dtype, kCPU, 0.25).to(device);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor out;
  const int64_t forward = peak_growth_on(device, [&] { out = op(a, b); });
  const Tensor grad = Tensor::ones(out.shape(), out.dtype(), device);
  const int64_t backward_peak = peak_growth_on(device, [&] { backward(out, grad); });
  return {forward, backward_peak};
}

TEST(SinglePatternArithmetic, BinaryOpsAndScaleOnTheCpuAllocateWhatEveryDryRunPlans) {
  struct Shapes {
    Shape a, b;
  };
  // Same shapes, a broadcast row, a broadcast column against a strided-looking layout.
  const Shapes shapes[] = {{{7, 333}, {7, 333}}, {{64, 1, 100}, {9, 1}}, {{5, 40}, {40}}};
  for (const DType dtype : kDtypes) {
    for (const Shapes& s : shapes) {
      for (const char* name : {"add", "sub", "mul", "scale"}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), " ", name, " ", s.a, " ", s.b));
        const std::string op = name;
        expect_cpu_run_as_planned([&](Device device) {
          return peaks_of(device, s.a, s.b, dtype, [&](const Tensor& a, const Tensor& b) {
            return op == "add"   ? add(a, b)
                   : op == "sub" ? sub(a, b)
                   : op == "mul" ? mul(a, b)
                                 : scale(a, -0.375);
          });
        });
      }
    }
  }
  // Mixed dtypes compute in f32.
  expect_cpu_run_as_planned([&](Device device) {
    return peaks_of(device, {6, 50}, {50}, DType::bf16,
                    [](const Tensor& a, const Tensor& b) { return add(a, b.to(DType::f32)); });
  });
}

TEST(SinglePatternArithmetic, ReductionsOnTheCpuAllocateWhatEveryDryRunPlans) {
  // The large shape passes kSumAllOneBlock, so sum_all allocates its partial sums.
  const Shape shapes[] = {{8, 50, 30}, {3, kSumAllOneBlock / 2 + 1}};
  for (const DType dtype : kDtypes) {
    for (const Shape& shape : shapes) {
      for (const char* name : {"sum", "mean", "sum0", "mean1k", "sum_last", "sum_to_shape"}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), " ", name, " ", shape));
        const std::string op = name;
        expect_cpu_run_as_planned([&](Device device) {
          return peaks_of(device, shape, {1}, dtype, [&](const Tensor& a, const Tensor&) {
            return op == "sum"        ? sum(a)
                   : op == "mean"     ? mean(a)
                   : op == "sum0"     ? sum(a, 0, false)
                   : op == "mean1k"   ? mean(a, 1, true)
                   : op == "sum_last" ? sum(a, -1, false)
                                      : sum_to_shape(a, Shape{shape[shape.ndim() - 1]});
          });
        });
      }
    }
  }
}

// The fp32 sums of the CPU kernels, rounded once into bf16 / f16, for inputs that every dtype
// holds exactly: sums of multiples of 1/8 under 2^11 are exact in fp32 and double, so the only
// rounding is the final one.
TEST(SinglePatternArithmetic, LowPrecisionSumsAreTheFp32SumRoundedOnce) {
  const Shape shape{6, 41, 7};
  const Tensor x32 = ramp(shape, DType::f32, kCPU);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = x32.to(dtype);
    EXPECT_EQ(sum(x).dtype(), dtype);
    EXPECT_EQ(sum(x).to_float_vector(), sum(x32).to(dtype).to_float_vector());
    for (int64_t dim : {0, 1, 2}) {
      EXPECT_EQ(sum(x, dim).to_float_vector(), sum(x32, dim).to(dtype).to_float_vector());
      // mean: the double sum times 1/n, rounded to fp32 and then to the dtype, as the fp32 mean
      // rounded once more (the CUDA kernels' rounding).
      EXPECT_EQ(mean(x, dim).to_float_vector(), mean(x32, dim).to(dtype).to_float_vector());
    }
    const Tensor y = ramp(shape, dtype, kCPU, 0.25);
    const Tensor y32 = y.to(DType::f32);
    EXPECT_EQ(mul(x, y).to_float_vector(), mul(x32, y32).to(dtype).to_float_vector());
    EXPECT_EQ(sub(x, y).to_float_vector(), sub(x32, y32).to(dtype).to_float_vector());
    EXPECT_EQ(scale(x, 0.3).to_float_vector(), scale(x32, 0.3).to(dtype).to_float_vector());
  }
}

// A large full sum goes through the fixed grid of partial sums: the result does not depend on
// the thread count, and equals the sum computed in double.
TEST(SinglePatternArithmetic, LargeSumsUseTheirPartialsAndMatchTheDoubleSum) {
  const int64_t n = 3 * kSumAllOneBlock + 17;
  std::vector<float> values(static_cast<size_t>(n));
  double expected = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    values[static_cast<size_t>(i)] = std::sin(static_cast<float>(i)) * 0.001f;
    expected += values[static_cast<size_t>(i)];
  }
  const Tensor x = Tensor::from_floats(values, {n});
  // Sums in double in another order differ far below fp32's rounding of the result.
  EXPECT_FLOAT_EQ(static_cast<float>(sum(x).item()), static_cast<float>(expected));
  EXPECT_FLOAT_EQ(static_cast<float>(mean(x).item()), static_cast<float>(expected / n));
  const Tensor again = sum(x);
  EXPECT_EQ(again.item(), sum(x).item());
}

}  // namespace
}  // namespace headroom
