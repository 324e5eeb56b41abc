// linear and matmul in their one allocation pattern (Note [Kernel tables]): on the meta device
// they allocate what the CUDA path will, to the byte,
// with no fp32 copies: outputs and gradients in the tensors' own dtypes, broadcast and transposed
// operands read in place. They have one code path, so a real CPU run allocates the same bytes
// (the SinglePattern tests).
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "core/error.h"
#include "memory/device_memory.h"
#include "ops/device_peak.h"
#include "ops/linear.h"
#include "ops/op_support.h"

namespace headroom {
namespace {

// The allocator's block for `bytes`: a multiple of 512.
int64_t block(int64_t bytes) { return (bytes + 511) / 512 * 512; }

int64_t block_of(const Shape& shape, DType dtype) {
  return block(shape.numel() * static_cast<int64_t>(dtype_size(dtype)));
}

// Peak allocated bytes on the meta device above what was allocated when it was made.
class MetaPeak {
 public:
  MetaPeak() : before_(static_cast<int64_t>(memory_allocated(kMeta))) {
    reset_peak_memory_stats(kMeta);
  }
  int64_t growth() const { return static_cast<int64_t>(max_memory_allocated(kMeta)) - before_; }

 private:
  int64_t before_;
};

Tensor meta(const Shape& shape, DType dtype, bool requires_grad = false) {
  Tensor t = Tensor::empty(shape, dtype, kMeta);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

const DType kFloatDtypes[] = {DType::f32, DType::bf16, DType::f16};

TEST(NativePatternLinear, ForwardAllocatesOnlyTheOutput) {
  for (DType dtype : kFloatDtypes) {
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
      const Tensor x = meta({2, 32, 256}, dtype);
      const Tensor w =
          meta(layout == WeightLayout::out_in ? Shape{128, 256} : Shape{256, 128}, dtype);
      const Tensor b = meta({128}, dtype);
      const MetaPeak peak;
      const Tensor out = linear(x, w, b, layout);
      EXPECT_EQ(out.dtype(), dtype) << dtype_name(dtype);
      EXPECT_EQ(out.shape(), (Shape{2, 32, 128}));
      EXPECT_EQ(peak.growth(), block_of({2, 32, 128}, dtype)) << dtype_name(dtype);
    }
  }
}

TEST(NativePatternLinear, BackwardWritesEachGradientInItsInputDtype) {
  for (DType dtype : kFloatDtypes) {
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
      const Shape w_shape = layout == WeightLayout::out_in ? Shape{128, 256} : Shape{256, 128};
      const Tensor x = meta({2, 32, 256}, dtype, true);
      const Tensor w = meta(w_shape, dtype, true);
      const Tensor b = meta({128}, DType::f32, true);  // an f32 bias: its gradient stays f32
      const Tensor out = linear(x, w, b, layout);
      const Tensor grad = meta(out.shape(), dtype);
      const MetaPeak peak;
      backward(out, grad);
      EXPECT_EQ(x.grad().dtype(), dtype);
      EXPECT_EQ(w.grad().dtype(), dtype);
      EXPECT_EQ(b.grad().dtype(), DType::f32);
      EXPECT_EQ(x.grad().shape(), x.shape());
      EXPECT_EQ(w.grad().shape(), w_shape);
      EXPECT_EQ(peak.growth(),
                block_of(x.shape(), dtype) + block_of(w_shape, dtype) + block_of({128}, DType::f32))
          << dtype_name(dtype);
    }
  }
}

// Only the gradients asked for are allocated.
TEST(NativePatternLinear, BackwardSkipsGradientsNobodyNeeds) {
  const Tensor x = meta({64, 256}, DType::bf16);
  const Tensor w = meta({128, 256}, DType::bf16, true);
  const Tensor out = linear(x, w);
  const Tensor grad = meta(out.shape(), DType::bf16);
  const MetaPeak peak;
  backward(out, grad);
  EXPECT_FALSE(x.grad().defined());
  EXPECT_EQ(peak.growth(), block_of({128, 256}, DType::bf16));
}

// x and weight in different dtypes multiply in f32; the output is x's dtype, as on the CPU.
TEST(NativePatternLinear, MixedDtypesMultiplyInF32) {
  const Tensor x = meta({64, 256}, DType::f32);
  const Tensor w = meta({128, 256}, DType::bf16);
  const MetaPeak peak;
  const Tensor out = linear(x, w);
  EXPECT_EQ(out.dtype(), DType::f32);
  // The weight's f32 copy and the output.
  EXPECT_EQ(peak.growth(), block_of({128, 256}, DType::f32) + block_of({64, 128}, DType::f32));
  EXPECT_EQ(linear(meta({64, 256}, DType::bf16), meta({128, 256}, DType::f32)).dtype(),
            DType::bf16);
}

// A weight shared by the batch is read with batch stride 0 (no expanded copy), and its gradient
// is one GEMM over all batch rows (no per-batch products to sum).
TEST(NativePatternMatmul, BroadcastOperandIsNeverExpanded) {
  for (DType dtype : kFloatDtypes) {
    const Tensor a = meta({4, 32, 64}, dtype, true);
    const Tensor b = meta({64, 48}, dtype, true);
    Tensor out;
    {
      const MetaPeak peak;
      out = matmul(a, b);
      EXPECT_EQ(out.dtype(), dtype);
      EXPECT_EQ(out.shape(), (Shape{4, 32, 48}));
      EXPECT_EQ(peak.growth(), block_of({4, 32, 48}, dtype)) << dtype_name(dtype);
    }
    const Tensor grad = meta(out.shape(), dtype);
    const MetaPeak peak;
    backward(out, grad);
    EXPECT_EQ(a.grad().dtype(), dtype);
    EXPECT_EQ(b.grad().dtype(), dtype);
    EXPECT_EQ(b.grad().shape(), (Shape{64, 48}));
    EXPECT_EQ(peak.growth(), block_of({4, 32, 64}, dtype) + block_of({64, 48}, dtype))
        << dtype_name(dtype);
  }
}

// k.transpose(-1, -2) and friends go to the GEMM as they are, with the transpose flag flipped.
TEST(NativePatternMatmul, TransposedOperandIsReadInPlace) {
  const Tensor q = meta({8, 16, 32}, DType::bf16);
  const Tensor k = meta({8, 24, 32}, DType::bf16);
  const MetaPeak peak;
  const Tensor scores = matmul(q, k.transpose(1, 2));
  EXPECT_EQ(scores.shape(), (Shape{8, 16, 24}));
  EXPECT_EQ(peak.growth(), block_of({8, 16, 24}, DType::bf16));
}

// Batch dimensions that do not collapse into one stride (a broadcast head dimension inside a
// real batch) are copied once, as the CPU does.
TEST(NativePatternMatmul, UncollapsibleBatchIsCopiedOnce) {
  const Tensor a = meta({2, 3, 16, 32}, DType::f16);
  const Tensor b = meta({2, 1, 32, 8}, DType::f16);
  const MetaPeak peak;
  const Tensor out = matmul(a, b);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 16, 8}));
  EXPECT_EQ(peak.growth(),
            block_of({2, 3, 16, 8}, DType::f16) + block_of({2, 3, 32, 8}, DType::f16));
}

TEST(NativePatternMatmul, MixedDtypesGiveF32) {
  EXPECT_EQ(matmul(meta({5, 7}, DType::bf16), meta({7, 3}, DType::f16)).dtype(), DType::f32);
  EXPECT_EQ(matmul(meta({5, 7}, DType::f32), meta({7, 3}, DType::bf16)).dtype(), DType::f32);
}

// A tensor of `shape` on `device` with random values (the CPU kernels really run).
Tensor filled(const Shape& shape, DType dtype, Device device, bool requires_grad = false) {
  Tensor t = Tensor::randn(shape, dtype, device);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

// One code path: a real CPU run of linear allocates, forward and backward, what the meta dry run
// plans, whichever device the dry run stands in for; in every dtype, both layouts, with and
// without a bias, and with a frozen weight (LoRA's base: x is not saved, no weight gradient).
TEST(SinglePatternLinear, ACpuRunAllocatesWhatEveryDryRunPlans) {
  for (const DType dtype : kFloatDtypes) {
    for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
      for (const bool with_bias : {true, false}) {
        for (const bool frozen : {false, true}) {
          SCOPED_TRACE(str_cat(dtype_name(dtype),
                               layout == WeightLayout::out_in ? " out_in" : " in_out",
                               with_bias ? " bias" : "", frozen ? " frozen" : ""));
          const Shape w_shape = layout == WeightLayout::out_in ? Shape{24, 40} : Shape{40, 24};
          auto peaks = [&](Device device) {
            const Tensor x = filled({3, 5, 40}, dtype, device, true);
            const Tensor w = filled(w_shape, dtype, device, !frozen);
            const Tensor b = with_bias ? filled({24}, dtype, device, !frozen) : Tensor();
            const Tensor grad = filled({3, 5, 24}, dtype, device);
            Tensor out;
            const int64_t forward = peak_growth_on(device, [&] { out = linear(x, w, b, layout); });
            const int64_t backward_peak = peak_growth_on(device, [&] { backward(out, grad); });
            EXPECT_EQ(out.dtype(), dtype);
            EXPECT_EQ(x.grad().dtype(), dtype);
            return std::pair{forward, backward_peak};
          };
          expect_cpu_run_as_planned(peaks);
        }
      }
    }
  }
}

// matmul: a weight broadcast over the batch, a transposed view, and mixed dtypes. (A batch that
// does not collapse sums its per-batch products with sum_to_shape, the reduction family's op,
// which is not on one code path yet, so it is left out here.)
TEST(SinglePatternMatmul, ACpuRunAllocatesWhatEveryDryRunPlans) {
  for (const DType dtype : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    auto peaks = [&](Device device) {
      const Tensor a = filled({2, 3, 6, 8}, dtype, device, true);
      const Tensor w = filled({8, 5}, dtype, device, true);
      const Tensor k = filled({2, 3, 7, 8}, dtype, device, true);
      const Tensor other = filled({8, 5}, dtype == DType::f32 ? DType::bf16 : DType::f32, device);
      Tensor y, scores, mixed;
      const int64_t forward = peak_growth_on(device, [&] {
        y = matmul(a, w);
        scores = matmul(a, k.transpose(-1, -2));
        mixed = matmul(a, other);
      });
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_EQ(mixed.dtype(), DType::f32);
      const int64_t backward_peak = peak_growth_on(device, [&] {
        backward(y, filled(y.shape(), dtype, device));
        backward(scores, filled(scores.shape(), dtype, device));
      });
      return std::pair{forward, backward_peak};
    };
    expect_cpu_run_as_planned(peaks);
  }
}

}  // namespace
}  // namespace headroom
