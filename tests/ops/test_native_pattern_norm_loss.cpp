// layer_norm, rms_norm, cross_entropy and linear_cross_entropy planned for a GPU: on the meta
// device they allocate in their one pattern (Note [Kernel tables]): outputs and gradients in the
// inputs' dtypes, f32 statistics, no f32 copies. Peaks are checked to the byte against sums made by
// hand from the caching allocator's 512-byte blocks.
#include <gtest/gtest.h>

#include <functional>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/error.h"
#include "backend/norm_kernels.h"
#include "core/grad_mode.h"
#include "memory/device_memory.h"
#include "ops/device_peak.h"
#include "ops/op_support.h"
#include "ops/ops.h"

namespace headroom {
namespace {

// The bytes the caching allocator books for a request of `bytes` (512-byte blocks).
int64_t block(int64_t bytes) { return (bytes + 511) / 512 * 512; }

// The growth of the meta device's peak allocated bytes while fn runs.
int64_t peak_growth(const std::function<void()>& fn) {
  const int64_t before = static_cast<int64_t>(memory_allocated(kMeta));
  reset_peak_memory_stats(kMeta);
  fn();
  return static_cast<int64_t>(max_memory_allocated(kMeta)) - before;
}

Tensor meta_input(const Shape& shape, DType dtype, bool requires_grad = true) {
  Tensor t = Tensor::empty(shape, dtype, kMeta);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

TEST(NativePatternNorm, LayerNormBf16AllocatesOutputsStatisticsAndGradientsOnly) {
  const int64_t rows = 40, dim = 96;
  const Tensor x = meta_input({4, rows / 4, dim}, DType::bf16);
  const Tensor w = meta_input({dim}, DType::bf16);
  const Tensor b = meta_input({dim}, DType::bf16);
  const Tensor grad = Tensor::empty({4, rows / 4, dim}, DType::bf16, kMeta);
  Tensor out;
  // out in bf16, mean and rstd in f32: no f32 copy of x, weight or bias.
  EXPECT_EQ(peak_growth([&] { out = layer_norm(x, w, b); }),
            block(rows * dim * 2) + 2 * block(rows * 4));
  EXPECT_EQ(out.dtype(), DType::bf16);
  // dx in bf16; dweight, dbias and the partials in f32, all alive in the kernel's call.
  const int64_t partial = block(norm_backward_blocks(rows) * 2 * dim * 4);
  EXPECT_EQ(peak_growth([&] { backward(out, grad); }),
            block(rows * dim * 2) + 2 * block(dim * 4) + partial);
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
  EXPECT_EQ(w.grad().dtype(), DType::bf16);
  EXPECT_EQ(b.grad().dtype(), DType::bf16);
}

TEST(NativePatternNorm, RmsNormF16WithF32WeightKeepsXsDtype) {
  const int64_t rows = 70, dim = 64;
  const Tensor x = meta_input({rows, dim}, DType::f16);
  const Tensor w = meta_input({dim}, DType::f32);
  const Tensor grad = Tensor::empty({rows, dim}, DType::f16, kMeta);
  Tensor out;
  EXPECT_EQ(peak_growth([&] { out = rms_norm(x, w); }), block(rows * dim * 2) + block(rows * 4));
  EXPECT_EQ(out.dtype(), DType::f16);
  const int64_t partial = block(norm_backward_blocks(rows) * 2 * dim * 4);
  EXPECT_EQ(peak_growth([&] { backward(out, grad); }),
            block(rows * dim * 2) + block(dim * 4) + partial);
  EXPECT_EQ(x.grad().dtype(), DType::f16);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
}

// Only x needs a gradient: no dweight and no partials.
TEST(NativePatternNorm, NoPartialsWithoutWeightGradients) {
  const int64_t rows = 33, dim = 128;
  const Tensor x = meta_input({rows, dim}, DType::bf16);
  const Tensor w = meta_input({dim}, DType::bf16, false);
  const Tensor grad = Tensor::empty({rows, dim}, DType::bf16, kMeta);
  const Tensor out = layer_norm(x, w, Tensor());
  EXPECT_EQ(peak_growth([&] { backward(out, grad); }), block(rows * dim * 2));
}

// One code path: a real CPU run allocates, forward and backward, exactly what the dry run on the
// meta device plans, and the dry run is the same whichever device it stands in for.
TEST(SinglePatternNorm, ACpuRunAllocatesWhatEveryDryRunPlans) {
  const int64_t rows = 40, dim = 96;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool centred : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (centred ? " layer_norm" : " rms_norm"));
      auto peaks = [&](Device device) {
        Tensor x = Tensor::zeros({rows, dim}, dtype, device);
        Tensor w = Tensor::ones({dim}, dtype, device);
        Tensor b = Tensor::zeros({dim}, dtype, device);
        const Tensor grad = Tensor::ones({rows, dim}, dtype, device);
        for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
        Tensor out;
        const int64_t forward =
            peak_growth_on(device, [&] { out = centred ? layer_norm(x, w, b) : rms_norm(x, w); });
        const int64_t backward_peak = peak_growth_on(device, [&] { backward(out, grad); });
        return std::pair{forward, backward_peak};
      };
      expect_cpu_run_as_planned(peaks);
    }
  }
}

TEST(NativePatternLoss, CrossEntropyBf16HasNoF32CopyOfTheLogits) {
  const int64_t rows = 64, vocab = 1000;
  const Tensor logits = meta_input({2, rows / 2, vocab}, DType::bf16);
  const Tensor targets = Tensor::empty({2, rows / 2}, DType::i64, kMeta);
  Tensor loss;
  // lse, the 0-d loss and the per-row losses.
  EXPECT_EQ(peak_growth([&] { loss = cross_entropy(logits, targets); }),
            2 * block(rows * 4) + block(4));
  EXPECT_EQ(loss.dtype(), DType::f32);
  EXPECT_EQ(loss.ndim(), 0);
  // The gradient in bf16, written by the kernel: nothing else.
  EXPECT_EQ(peak_growth([&] { backward(loss); }), block(rows * vocab * 2) + block(4));
  EXPECT_EQ(logits.grad().dtype(), DType::bf16);
}

// Autocast's fp32 policy for cross_entropy costs no copy: the kernels read bf16 and compute in
// fp32, on every device.
TEST(NativePatternLoss, CrossEntropyUnderAutocastReadsBf16Logits) {
  const int64_t rows = 64, vocab = 1000;
  auto forward_peak = [&] {
    const Tensor logits = meta_input({rows, vocab}, DType::bf16);
    const Tensor targets = Tensor::empty({rows}, DType::i32, kMeta);
    Autocast autocast(DeviceType::meta, DType::bf16);
    return peak_growth([&] { Tensor loss = cross_entropy(logits, targets); });
  };
  EXPECT_EQ(forward_peak(), 2 * block(rows * 4) + block(4));
  EXPECT_EQ(forward_peak(), 2 * block(rows * 4) + block(4));
}

// bf16 x and weight, 300 tokens in chunks of 128: the chunk's f32 logits, its bf16 gradient for
// the GEMMs, lse, per-token losses, dx in bf16 and dweight in f32, and no copy of x or weight.
TEST(NativePatternLoss, LinearCrossEntropyBf16Chunks) {
  const int64_t rows = 300, dim = 64, vocab = 500, chunk = 128;
  const Tensor x = meta_input({rows, dim}, DType::bf16);
  const Tensor w = meta_input({vocab, dim}, DType::bf16);
  const Tensor targets = Tensor::empty({rows}, DType::i64, kMeta);
  Tensor loss;
  const int64_t kept = block(rows * dim * 2) + block(vocab * dim * 4);
  EXPECT_EQ(peak_growth([&] { loss = linear_cross_entropy_chunked(x, w, targets, -100, chunk); }),
            block(chunk * vocab * 4) + block(chunk * 4) + block(rows * 4) + kept +
                block(chunk * vocab * 2) + block(4));
  EXPECT_EQ(loss.dtype(), DType::f32);
  // Backward scales dx and dweight in place on the device; the node's only cast is dweight's
  // f32 to the weight's bf16 (dx is bf16 already).
  EXPECT_EQ(peak_growth([&] { backward(loss); }), block(4) + block(vocab * dim * 2));
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
  EXPECT_EQ(w.grad().dtype(), DType::bf16);
}

// f32 operands: the gradient replaces the logits in place (no second chunk buffer); with the
// graph retained, backward scales into fresh buffers instead.
TEST(NativePatternLoss, LinearCrossEntropyF32InPlaceAndRetained) {
  const int64_t rows = 50, dim = 32, vocab = 200, chunk = 16;
  const Tensor x = meta_input({rows, dim}, DType::f32);
  const Tensor w = meta_input({vocab, dim}, DType::f32);
  const Tensor targets = Tensor::empty({rows}, DType::i64, kMeta);
  Tensor loss;
  const int64_t dx = block(rows * dim * 4), dweight = block(vocab * dim * 4);
  EXPECT_EQ(
      peak_growth([&] { loss = linear_cross_entropy_chunked(x, w, targets, -100, chunk); }),
      block(chunk * vocab * 4) + block(chunk * 4) + block(rows * 4) + dx + dweight + block(4));
  EXPECT_EQ(peak_growth([&] { backward(loss, Tensor(), true); }), block(4) + dx + dweight);
}

// No gradients wanted: only the chunk's logits, lse and the per-token losses.
TEST(NativePatternLoss, LinearCrossEntropyWithoutGradients) {
  const int64_t rows = 96, dim = 32, vocab = 512, chunk = 32;
  const Tensor x = meta_input({rows, dim}, DType::bf16);
  const Tensor w = meta_input({vocab, dim}, DType::bf16);
  const Tensor targets = Tensor::empty({rows}, DType::i64, kMeta);
  NoGradGuard no_grad;
  EXPECT_EQ(
      peak_growth([&] { Tensor loss = linear_cross_entropy_chunked(x, w, targets, -100, chunk); }),
      block(chunk * vocab * 4) + block(chunk * 4) + block(rows * 4) + block(4));
}

// Targets for `rows` tokens: every fifth one ignored (-100), the others spread over the vocabulary.
Tensor loss_targets(int64_t rows, int64_t vocab, DType dtype, Device device) {
  std::vector<int64_t> values(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    values[static_cast<size_t>(r)] = r % 5 == 4 ? -100 : (r * 37) % vocab;
  return Tensor::from_ints(values, {rows}, dtype, device);
}

// One code path: cross_entropy in every dtype, on a strided view of its logits too, allocates on
// a real CPU run what every dry run plans, forward and backward.
TEST(SinglePatternLoss, CrossEntropyCpuRunAllocatesWhatEveryDryRunPlans) {
  const int64_t rows = 48, vocab = 300;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool strided : {false, true}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), strided ? " strided" : ""));
      auto peaks = [&](Device device) {
        // A strided leaf: rows of `vocab` logits 20 elements apart.
        const Tensor base = Tensor::randn({rows, strided ? vocab + 20 : vocab}, dtype, device);
        Tensor logits = strided ? base.narrow(1, 0, vocab) : base;
        logits.set_requires_grad(true);
        const Tensor targets = loss_targets(rows, vocab, DType::i32, device);
        Tensor loss;
        const int64_t forward =
            peak_growth_on(device, [&] { loss = cross_entropy(logits, targets); });
        const int64_t backward_peak = peak_growth_on(device, [&] { backward(loss); });
        EXPECT_EQ(logits.grad().dtype(), dtype);
        return std::pair{forward, backward_peak};
      };
      expect_cpu_run_as_planned(peaks);
    }
  }
}

// linear_cross_entropy in every dtype, in chunks, with and without gradients, with a loss scale
// (backward scales dx and dweight) and with the graph retained (it scales into fresh buffers).
TEST(SinglePatternLoss, LinearCrossEntropyCpuRunAllocatesWhatEveryDryRunPlans) {
  const int64_t rows = 70, dim = 24, vocab = 130, chunk = 32;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const int mode : {0, 1, 2}) {  // 0: plain, 1: loss scale 4 and retained graph, 2: no grad
      SCOPED_TRACE(str_cat(dtype_name(dtype), " mode ", mode));
      auto peaks = [&](Device device) {
        Tensor x = Tensor::randn({2, rows / 2, dim}, dtype, device);
        Tensor w = Tensor::randn({vocab, dim}, dtype, device);
        if (mode != 2) {
          x.set_requires_grad(true);
          w.set_requires_grad(true);
        }
        const Tensor targets = loss_targets(rows, vocab, DType::i64, device).reshape({2, rows / 2});
        Tensor loss;
        const int64_t forward = peak_growth_on(
            device, [&] { loss = linear_cross_entropy_chunked(x, w, targets, -100, chunk); });
        int64_t backward_peak = 0;
        if (mode != 2) {
          const Tensor scale = Tensor::full(Shape{}, mode == 1 ? 4.0 : 1.0, DType::f32, device);
          backward_peak = peak_growth_on(device, [&] { backward(loss, scale, mode == 1); });
          EXPECT_EQ(x.grad().dtype(), dtype);
          EXPECT_EQ(w.grad().dtype(), dtype);
        }
        return std::pair{forward, backward_peak};
      };
      expect_cpu_run_as_planned(peaks);
    }
  }
}

}  // namespace
}  // namespace headroom
