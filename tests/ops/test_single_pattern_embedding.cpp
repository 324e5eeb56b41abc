// embedding on one code path: a real CPU run allocates exactly what a meta dry run plans,
// whichever device the dry run stands in for, in every dtype and with i32 or i64 ids; and the
// CPU's backward reads a bf16 / f16 gradient in its own dtype with the sums of the fp32 kernel.
// (embedding has no padding_idx: every id's row receives its gradient.)
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "memory/device_memory.h"
#include "ops/device_peak.h"
#include "ops/ops.h"

namespace headroom {
namespace {

TEST(SinglePatternEmbedding, ACpuRunAllocatesWhatEveryDryRunPlans) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const DType id_dtype : {DType::i32, DType::i64}) {
      for (const bool strided_ids : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " weight, " + dtype_name(id_dtype) +
                     (strided_ids ? " transposed ids" : " ids"));
        auto peaks = [&](Device device) {
          Tensor weight = Tensor::ones({50, 130}, dtype, device);
          weight.set_requires_grad(true);
          // Zeros are in range; transposed ids make the op's contiguous copy of them.
          const Tensor ids = strided_ids ? Tensor::zeros({7, 4}, id_dtype, device).transpose(0, 1)
                                         : Tensor::zeros({4, 7}, id_dtype, device);
          Tensor out;
          const int64_t forward = peak_growth_on(device, [&] { out = embedding(weight, ids); });
          const Tensor grad = Tensor::ones(out.shape(), dtype, device);
          const int64_t backward_peak = peak_growth_on(device, [&] { backward(out, grad); });
          EXPECT_EQ(weight.grad().dtype(), dtype);
          return std::pair{forward, backward_peak};
        };
        expect_cpu_run_as_planned(peaks);
      }
    }
  }
}

// The f32 gradient sums of a bf16 / f16 grad_out, read in its dtype, are the fp32 kernel's sums
// of the same (widened, exact) values in the same token order: equal bit for bit, and so is the
// weight's gradient once rounded to its dtype. Repeated ids, two column blocks and enough work to
// run on several threads.
TEST(SinglePatternEmbedding, LowPrecisionGradientIsFp32SumRoundedOnce) {
  Generator gen(8);
  std::vector<int64_t> id_values(300);
  for (size_t t = 0; t < id_values.size(); ++t) id_values[t] = static_cast<int64_t>((t * 37) % 100);
  const Tensor ids = Tensor::from_ints(id_values, {4, 75}, DType::i32);
  const Tensor weight32 = Tensor::randn({100, 130}, DType::f32, kCPU, &gen);
  const Tensor grad32 = Tensor::randn({4, 75, 130}, DType::f32, kCPU, &gen);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor weight = weight32.to(dtype).set_requires_grad(true);
    const Tensor grad = grad32.to(dtype);
    backward(embedding(weight, ids), grad);
    const Tensor wide = weight32.to(dtype).to(DType::f32).set_requires_grad(true);
    backward(embedding(wide, ids), grad.to(DType::f32));
    EXPECT_EQ(weight.grad().dtype(), dtype);
    EXPECT_EQ(weight.grad().to_float_vector(), wide.grad().to(dtype).to_float_vector());
  }
}

}  // namespace
}  // namespace headroom
