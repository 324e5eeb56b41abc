// One code path for the gradient checks (issue 17): clip_grad_norm_, grad_norm, clip_grad_value_
// and the GradScaler's unscale_ / step on the CPU allocate exactly what the meta device's dry run
// plans, whichever device it stands in for, with f32 and bf16 gradients: the partial norms, the
// f32 [2] total-and-factor and the found_inf flag, and no fp32 copy of any 16-bit gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "backend/grad_check_kernels.h"
#include "core/tensor.h"
#include "ops/device_peak.h"
#include "optim/clip_grad.h"
#include "optim/optimizer.h"

namespace headroom {
namespace {

// An optimizer that counts its steps and changes nothing, so that a step's peak is the scaler's
// own (each optimizer's pattern is tested with that optimizer).
class CountingOptimizer final : public Optimizer {
 public:
  explicit CountingOptimizer(const std::vector<Tensor>& params) {
    ParamGroup group{.lr = 0.5, .weight_decay = 0.0};
    for (size_t i = 0; i < params.size(); ++i) {
      group.params.emplace_back(std::to_string(i), params[i]);
    }
    groups_.push_back(group);
  }
  void step() override { ++steps; }
  std::string name() const override { return "counting"; }
  int steps = 0;
};

// Bytes the caching allocators charge for a request (multiples of 512).
int64_t charged(int64_t bytes) { return (bytes + 511) / 512 * 512; }

// Parameters on `device` with gradients of `dtype` whose norm is above 1 (so clipping scales
// them); the second gradient is a transposed view when `strided`.
std::vector<Tensor> params_on(Device device, DType dtype, bool strided) {
  std::vector<Tensor> params;
  for (const Shape& shape : {Shape{300, 7}, Shape{41}}) {
    Tensor p = Tensor::zeros(shape, DType::f32, device).set_requires_grad(true);
    params.push_back(p);
  }
  params[0].set_grad(Tensor::full({300, 7}, 0.5, dtype, device));
  params[1].set_grad(strided ? Tensor::full({41}, 0.25, dtype, device)
                             : Tensor::full({41}, -0.25, dtype, device));
  if (strided) {
    Tensor p = Tensor::zeros({7, 300}, DType::f32, device).set_requires_grad(true);
    p.set_grad(Tensor::full({300, 7}, 0.5, dtype, device).transpose(0, 1));
    params.push_back(p);
  }
  return params;
}

TEST(GradCheckPattern, ClippingOnTheCpuAllocatesWhatEveryDryRunPlans) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const bool strided : {false, true}) {
      for (const char* name : {"clip_grad_norm_", "grad_norm", "clip_grad_value_"}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), " ", name, strided ? " strided" : ""));
        const std::string op = name;
        expect_cpu_run_as_planned([&](Device device) {
          const std::vector<Tensor> params = params_on(device, dtype, strided);
          const int64_t peak = peak_growth_on(device, [&] {
            if (op == "clip_grad_norm_")
              clip_grad_norm_(params, 1.0);
            else if (op == "grad_norm")
              grad_norm(params);
            else
              clip_grad_value_(params, 0.3);
          });
          return std::pair<int64_t, int64_t>{peak, 0};
        });
      }
    }
  }
}

TEST(GradCheckPattern, ClippingAllocatesOnlyThePartialsAndTheResult) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<Tensor> params = params_on(kCPU, dtype, false);
    const int64_t expected = charged(2 * kNormPartialBlocks * 8) + charged(2 * 4);
    double total = 0.0;
    EXPECT_EQ(peak_growth_on(kCPU, [&] { total = clip_grad_norm_(params, 1.0); }), expected);
    EXPECT_FLOAT_EQ(static_cast<float>(total), std::sqrt(2100 * 0.25f + 41 * 0.0625f));
    EXPECT_EQ(params[0].grad().dtype(), dtype);
    // clip_grad_value_ clamps in place: nothing at all.
    EXPECT_EQ(peak_growth_on(kCPU, [&] { clip_grad_value_(params, 0.01); }), 0);
    // The fp32 bound, rounded once into the gradient's dtype.
    EXPECT_EQ(params[1].grad().to_float_vector(),
              Tensor::full({41}, static_cast<double>(-0.01f), dtype).to_float_vector());
  }
}

TEST(GradCheckPattern, GradScalerOnTheCpuAllocatesWhatEveryDryRunPlans) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const bool strided : {false, true}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), strided ? " strided" : ""));
      expect_cpu_run_as_planned([&](Device device) {
        const std::vector<Tensor> params = params_on(device, dtype, strided);
        CountingOptimizer optimizer(params);
        GradScaler scaler({.init_scale = 1024.0});
        scaler.scale(Tensor::ones({}, DType::f32, device));
        const int64_t unscale = peak_growth_on(device, [&] { scaler.unscale_(optimizer); });
        const int64_t step = peak_growth_on(device, [&] {
          scaler.step(optimizer);
          scaler.update();
        });
        return std::pair{unscale, step};
      });
    }
  }
}

TEST(GradCheckPattern, UnscaleAllocatesOneFlagAndNoCopies) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<Tensor> params = params_on(kCPU, dtype, false);
    CountingOptimizer optimizer(params);
    GradScaler scaler({.init_scale = 1024.0});
    scaler.scale(Tensor::ones({}));
    const void* before = params[0].grad().data_ptr();
    EXPECT_EQ(peak_growth_on(kCPU, [&] { scaler.unscale_(optimizer); }), charged(4));
    EXPECT_EQ(params[0].grad().data_ptr(), before);  // unscaled in place, in its dtype
    EXPECT_EQ(params[0].grad().dtype(), dtype);
    EXPECT_EQ(params[0].grad().to_float_vector(), std::vector<float>(2100, 0.5f / 1024));
    EXPECT_FALSE(scaler.found_inf(optimizer));
    EXPECT_TRUE(scaler.step(optimizer));
    EXPECT_EQ(optimizer.steps, 1);
    scaler.update();
  }
}

}  // namespace
}  // namespace headroom
