// LoRA's and QLoRA's projections on one code path: a real CPU run of a frozen base (dense or
// 4-bit NF4) with its adapter's two linears allocates, forward and backward, what the meta dry run
// plans, whichever device the dry run stands in for, in f32, bf16 and f16.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "ops/device_peak.h"
#include "ops/linear.h"
#include "quant/linear_4bit.h"
#include "quant/quant_4bit.h"

namespace headroom {
namespace {

TEST(SinglePatternLora, AdapterOnADenseOrFourBitBaseAllocatesWhatEveryDryRunPlans) {
  const int64_t in = 64, out = 48, r = 4;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool four_bit : {false, true}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), four_bit ? " 4-bit base" : " dense base"));
      auto peaks = [&](Device device) {
        Generator gen(11);
        Tensor x = Tensor::randn({2, 6, in}, dtype, device, &gen);
        x.set_requires_grad(true);
        // The frozen base: no gradient, so the linear keeps the weight for dx and not x.
        const Tensor w = Tensor::randn({out, in}, dtype, device, &gen);
        Quant4bitConfig config;
        config.quant_type = Quant4bitType::nf4;
        config.double_quant = true;
        const Quant4bitWeight q =
            quantize_4bit(device == kCPU ? Tensor::randn({out, in}, DType::f32, kCPU, &gen)
                                         : Tensor::empty({out, in}, DType::f32, device),
                          config);
        Tensor a = Tensor::randn({r, in}, dtype, device, &gen);
        Tensor b = Tensor::randn({out, r}, dtype, device, &gen);
        a.set_requires_grad(true);
        b.set_requires_grad(true);
        const Tensor grad = Tensor::randn({2, 6, out}, dtype, device, &gen);
        Tensor base, delta;
        const int64_t forward = peak_growth_on(device, [&] {
          base = four_bit ? linear_4bit(x, q, Tensor(), dtype) : linear(x, w);
          delta = linear(linear(x, a), b);
        });
        const int64_t backward_peak = peak_growth_on(device, [&] {
          backward({base, delta}, {grad, grad});
        });
        EXPECT_EQ(x.grad().dtype(), dtype);
        EXPECT_EQ(a.grad().dtype(), dtype);
        EXPECT_EQ(b.grad().dtype(), dtype);
        return std::pair{forward, backward_peak};
      };
      expect_cpu_run_as_planned(peaks);
    }
  }
}

}  // namespace
}  // namespace headroom
