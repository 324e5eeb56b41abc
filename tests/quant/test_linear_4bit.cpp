// The 4-bit linear: forward and dX against a linear on the dequantized weight, in f32 / bf16 /
// f16 compute; no weight gradient; the meta device allocates the same bytes; and forward +
// backward never hold a whole dequantized weight (the allocator's peak says so).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "memory/device_memory.h"
#include "ops/linear.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "quant/linear_4bit.h"

namespace headroom {
namespace {

Quant4bitWeight make_weight(int64_t out, int64_t in, Quant4bitType type, bool nested,
                            Device device = kCPU) {
  Generator g(7);
  Quant4bitConfig config;
  config.quant_type = type;
  config.double_quant = nested;
  const Tensor w = Tensor::randn({out, in}, DType::f32, kCPU, &g);
  return quantize_4bit(device == kCPU ? w : Tensor::empty({out, in}, DType::f32, device), config);
}

void expect_close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<float> x = a.to_float_vector(), y = b.to_float_vector();
  // The 4-bit kernel sums its tiles in another order than the dense GEMM it is compared with;
  // each caller states the rtol / atol its dtype needs.
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(x[i], y[i], atol + rtol * std::fabs(y[i])) << "element " << i;
  }
}

TEST(Linear4bit, ForwardAndInputGradientMatchTheDequantizedLinear) {
  for (const bool nested : {false, true}) {
    for (const Quant4bitType type : {Quant4bitType::nf4, Quant4bitType::fp4}) {
      SCOPED_TRACE(str_cat(quant_4bit_type_name(type), nested ? " nested" : ""));
      // 300 outputs: three weight tiles, the last short; 300 rows: two row tiles.
      const Quant4bitWeight q = make_weight(300, 72, type, nested);
      Generator g(3);
      const Tensor x = Tensor::randn({3, 100, 72}, DType::f32, kCPU, &g).set_requires_grad(true);
      const Tensor bias = Tensor::randn({300}, DType::f32, kCPU, &g).set_requires_grad(true);
      const Tensor y = linear_4bit(x, q, bias, DType::f32);
      const Tensor w = dequantize_4bit(q, DType::f32);
      const Tensor x_ref = x.detach().set_requires_grad(true);
      const Tensor b_ref = bias.detach().clone().set_requires_grad(true);
      const Tensor y_ref = linear(x_ref, w, b_ref);
      expect_close(y, y_ref, 1e-5, 1e-5);
      const Tensor dy = Tensor::randn(y.shape(), DType::f32, kCPU, &g);
      backward(sum(mul(y, dy)));
      backward(sum(mul(y_ref, dy)));
      expect_close(x.grad(), x_ref.grad(), 1e-5, 1e-5);
      expect_close(bias.grad(), b_ref.grad(), 1e-5, 1e-5);
    }
  }
}

TEST(Linear4bit, LowPrecisionComputeRoundsTheWeightAndTheResultOnce) {
  const Quant4bitWeight q = make_weight(40, 64, Quant4bitType::nf4, true);
  Generator g(5);
  const Tensor x = Tensor::randn({9, 64}, DType::f32, kCPU, &g);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor xc = x.to(dtype).set_requires_grad(true);
    const Tensor y = linear_4bit(xc, q, Tensor(), dtype);
    EXPECT_EQ(y.dtype(), dtype);
    // The reference: operands rounded to the compute dtype, fp32 products, one rounding.
    const Tensor w = dequantize_4bit(q, DType::f32).to(dtype).to(DType::f32);
    const Tensor y_ref = linear(xc.detach().to(DType::f32), w).to(dtype);
    expect_close(y, y_ref, 1e-2, 1e-3);
    const Tensor dy = Tensor::randn(y.shape(), DType::f32, kCPU, &g).to(dtype);
    backward(sum(mul(y, dy)));
    EXPECT_EQ(xc.grad().dtype(), dtype);
    expect_close(xc.grad(), matmul(dy.to(DType::f32), w).to(dtype), 1e-2, 1e-3);
  }
}

TEST(Linear4bit, InputDtypeIsKeptAsBitsandbytesCastsBack) {
  const Quant4bitWeight q = make_weight(8, 32, Quant4bitType::fp4, false);
  const Tensor y = linear_4bit(Tensor::randn({2, 32}).to(DType::bf16), q, Tensor(), DType::f32);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_THROW(linear_4bit(Tensor::randn({2, 31}), q, Tensor(), DType::f32), ValueError);
  EXPECT_THROW(linear_4bit(Tensor::randn({2, 32}), q, Tensor(), DType::f8_e4m3fn), ValueError);
  EXPECT_THROW(linear_4bit(Tensor::randn({2, 32}), q, Tensor::zeros({7}), DType::f32), ValueError);
}

// Forward + backward of one 4-bit linear; returns the peak of the bytes its tensors requested
// beyond those requested before, and the number of allocations. Requested bytes, not allocated
// ones: a block cached by an earlier test may serve a request unsplit and count its whole size.
std::pair<int64_t, int64_t> step_peak(Device device, int64_t out, int64_t in, int64_t rows) {
  const Quant4bitWeight q = make_weight(out, in, Quant4bitType::nf4, true, device);
  const Tensor x = Tensor::zeros({rows, in}, DType::bf16, device).set_requires_grad(true);
  const int64_t before = memory_stats(device).at("requested_bytes.all.current");
  const int64_t allocations_before = memory_stats(device).at("allocation.all.allocated");
  reset_peak_memory_stats(device);
  {
    const Tensor y = linear_4bit(x, q, Tensor(), DType::bf16);
    const Tensor dy = Tensor::zeros(y.shape(), DType::bf16, device);
    backward(y, dy);
  }
  const std::map<std::string, int64_t> stats = memory_stats(device);
  return {stats.at("requested_bytes.all.peak") - before,
          stats.at("allocation.all.allocated") - allocations_before};
}

TEST(Linear4bit, NoWholeDequantizedWeightIsEverAllocated) {
  const int64_t out = 2048, in = 2048, rows = 8;
  const auto [peak, allocations] = step_peak(kCPU, out, in, rows);
  // A bf16 copy of the weight alone would take out * in * 2 bytes = 8 MiB; forward and backward
  // hold a workspace of one weight tile (128 of its 2048 rows or columns) in fp32 plus row tiles:
  // about 1 MiB.
  EXPECT_LT(peak, out * in * 2 / 4);
  EXPECT_GT(peak, 0);
  const auto [meta_peak, meta_allocations] = step_peak(kMeta, out, in, rows);
  EXPECT_EQ(meta_peak, peak);
  EXPECT_EQ(meta_allocations, allocations);
}

TEST(Linear4bit, MissingKernelNamesOpEntryAndDevice) {
  // The probe needs a device without the family: cuda in a CPU-only build (with CUDA built it
  // has it).
  if (find_kernels<QuantizationKernels>(DeviceType::cuda)) {
    GTEST_SKIP() << "this build has the CUDA backend";
  }
  try {
    need_kernel("linear_4bit", Device{DeviceType::cuda, 0},
                &QuantizationKernels::linear_4bit_forward);
    FAIL() << "no error";
  } catch (const NotImplementedError& e) {
    EXPECT_EQ(std::string(e.what()),
              "linear_4bit has no kernel for cuda:0 yet: its backend lacks "
              "quantization.linear_4bit_forward");
  }
}

}  // namespace
}  // namespace headroom
