// scaled_dot_product_attention's one allocation pattern, the same on every device: out in q's
// dtype and lse, then delta, the fp32 dQ accumulator (q not f32) and the three gradients in q's
// dtype, with no fp32 copies of q, k, v or out. A meta dry run allocates it whichever device it
// stands in for, and a real CPU run allocates exactly what the dry run plans. Byte counts are by
// hand; every buffer here is a multiple of the allocator's 512-byte rounding.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "core/tensor.h"
#include "memory/device_memory.h"
#include "ops/device_peak.h"
#include "ops/ops.h"
#include "ops/op_support.h"

namespace headroom {
namespace {

struct Case {
  int64_t b, hq, hkv, t, d;
  DType dtype;
  bool causal;
  double dropout_p;
};

int64_t bytes_of(int64_t elements, DType dtype) {
  return elements * static_cast<int64_t>(dtype_size(dtype));
}

struct Peaks {
  int64_t forward_kept, forward_peak, backward_peak;
  DType out_dtype, grad_q_dtype, grad_k_dtype, grad_v_dtype;
};

Peaks run_on_meta(const Case& c) {
  Tensor q = Tensor::empty({c.b, c.hq, c.t, c.d}, c.dtype, kMeta).set_requires_grad(true);
  Tensor k = Tensor::empty({c.b, c.hkv, c.t, c.d}, c.dtype, kMeta).set_requires_grad(true);
  Tensor v = Tensor::empty({c.b, c.hkv, c.t, c.d}, c.dtype, kMeta).set_requires_grad(true);
  const Tensor grad = Tensor::empty({c.b, c.hq, c.t, c.d}, c.dtype, kMeta);
  Peaks peaks;
  const int64_t before = static_cast<int64_t>(memory_allocated(kMeta));
  reset_peak_memory_stats(kMeta);
  {
    Tensor out = scaled_dot_product_attention(q, k, v, c.causal, {}, c.dropout_p);
    peaks.out_dtype = out.dtype();
    peaks.forward_kept = static_cast<int64_t>(memory_allocated(kMeta)) - before;
    peaks.forward_peak = static_cast<int64_t>(max_memory_allocated(kMeta)) - before;
    reset_peak_memory_stats(kMeta);
    backward(out, grad);
    peaks.backward_peak = static_cast<int64_t>(max_memory_allocated(kMeta)) - before;
  }
  peaks.grad_q_dtype = q.grad().dtype();
  peaks.grad_k_dtype = k.grad().dtype();
  peaks.grad_v_dtype = v.grad().dtype();
  return peaks;
}

TEST(NativePatternAttention, AllocatesOutputsStatisticsAndGradientsOnly) {
  for (const Case& c : {Case{2, 4, 2, 64, 64, DType::bf16, true, 0.0},
                        Case{2, 4, 4, 64, 128, DType::f16, false, 0.1},
                        Case{1, 8, 2, 128, 64, DType::bf16, true, 0.2},
                        Case{2, 4, 2, 64, 64, DType::f32, true, 0.0}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + (c.causal ? " causal" : " full"));
    const Peaks peaks = run_on_meta(c);
    const int64_t q_elems = c.b * c.hq * c.t * c.d, kv_elems = c.b * c.hkv * c.t * c.d;
    const int64_t out = bytes_of(q_elems, c.dtype);
    const int64_t lse = bytes_of(c.b * c.hq * c.t, DType::f32);
    // Kept for backward besides the inputs: out and lse; nothing else is allocated on the way.
    EXPECT_EQ(peaks.forward_kept, out + lse);
    EXPECT_EQ(peaks.forward_peak, out + lse);
    // Backward: delta, the fp32 dQ accumulator (not for f32) and the three gradients.
    const int64_t accum = c.dtype == DType::f32 ? 0 : bytes_of(q_elems, DType::f32);
    const int64_t grads = bytes_of(q_elems, c.dtype) + 2 * bytes_of(kv_elems, c.dtype);
    EXPECT_EQ(peaks.backward_peak, out + lse + lse + accum + grads);
    EXPECT_EQ(peaks.out_dtype, c.dtype);
    EXPECT_EQ(peaks.grad_q_dtype, c.dtype);
    EXPECT_EQ(peaks.grad_k_dtype, c.dtype);
    EXPECT_EQ(peaks.grad_v_dtype, c.dtype);
  }
}

TEST(NativePatternAttention, MetaPlansOnePatternWithOrWithoutTheGuard) {
  // The CPU reads bf16 q, k, v in place as CUDA does: no fp32 copies, with or without the guard.
  const Case c{2, 4, 2, 64, 64, DType::bf16, true, 0.0};
  const int64_t out = bytes_of(c.b * c.hq * c.t * c.d, DType::bf16);
  const int64_t lse = bytes_of(c.b * c.hq * c.t, DType::f32);
  const Peaks plain = run_on_meta(c);
  EXPECT_EQ(plain.forward_kept, out + lse);
  EXPECT_EQ(plain.forward_peak, out + lse);
  const Peaks like_cuda = run_on_meta(c);
  EXPECT_EQ(like_cuda.forward_peak, plain.forward_peak);
  EXPECT_EQ(like_cuda.backward_peak, plain.backward_peak);
}

// One code path: a real CPU run, forward and backward, allocates exactly what the meta dry run
// plans, whichever device the dry run stands in for; in every dtype, causal or not, with and
// without dropout, with GQA, and with a head size (128) whose bf16 / f16 tiles are smaller than
// the f32 ones (Note [Widened attention tiles] in backend/cpu/attention.cpp).
TEST(SinglePatternAttention, ACpuRunAllocatesWhatEveryDryRunPlans) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const Case& c :
         {Case{2, 4, 2, 70, 16, dtype, true, 0.0}, Case{2, 4, 2, 70, 16, dtype, false, 0.0},
          Case{2, 4, 2, 70, 16, dtype, true, 0.2}, Case{1, 2, 2, 37, 8, dtype, false, 0.3},
          Case{1, 4, 1, 130, 128, dtype, true, 0.1}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (c.causal ? " causal" : " full") + " dropout " +
                   std::to_string(c.dropout_p) + " D " + std::to_string(c.d));
      auto peaks = [&](Device device) {
        Tensor q = Tensor::ones({c.b, c.hq, c.t, c.d}, dtype, device);
        Tensor k = Tensor::ones({c.b, c.hkv, c.t, c.d}, dtype, device);
        Tensor v = Tensor::ones({c.b, c.hkv, c.t, c.d}, dtype, device);
        for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
        const Tensor grad = Tensor::ones({c.b, c.hq, c.t, c.d}, dtype, device);
        Tensor out;
        const int64_t forward = peak_growth_on(device, [&] {
          out = scaled_dot_product_attention(q, k, v, c.causal, {}, c.dropout_p);
        });
        const int64_t backward_peak = peak_growth_on(device, [&] { backward(out, grad); });
        EXPECT_EQ(q.grad().dtype(), dtype);
        return std::pair{forward, backward_peak};
      };
      expect_cpu_run_as_planned(peaks);
    }
  }
}

TEST(NativePatternAttention, TransposedViewsAreReadInPlace) {
  // [B, T, H, D] projections viewed as [B, H, T, D] keep a unit stride in D: no copy.
  const int64_t b = 2, t = 64, hq = 4, hkv = 2, d = 64;
  const Tensor q = Tensor::empty({b, t, hq, d}, DType::bf16, kMeta);
  const Tensor k = Tensor::empty({b, t, hkv, d}, DType::bf16, kMeta);
  const int64_t before = static_cast<int64_t>(memory_allocated(kMeta));
  reset_peak_memory_stats(kMeta);
  const Tensor out = scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2),
                                                  transpose(k, 1, 2), true);
  EXPECT_EQ(static_cast<int64_t>(max_memory_allocated(kMeta)) - before,
            bytes_of(b * hq * t * d, DType::bf16) + bytes_of(b * hq * t, DType::f32));
  EXPECT_EQ(out.dtype(), DType::bf16);
  EXPECT_EQ(out.shape(), (Shape{b, hq, t, d}));
}

}  // namespace
}  // namespace headroom
