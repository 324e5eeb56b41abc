// Attention through cuDNN (backend/cuda/cudnn_attention.h) against the CPU kernels on the same
// inputs, at the kernel table: out, lse and the three gradients, causal and not, GQA, bf16 and
// f16, T != S, a window, head sizes 64 and 128, q / k / v read as views of one fused projection
// and the gradients written into one; each case asserts that cuDNN ran it (a silent fallback to
// our kernel fails). Also: cuDNN's forward read by our backward and ours by its, and the problems
// it must decline (f32, dropout, softcap, packed) still matching the CPU. Skipped without a GPU
// or where libcudnn cannot be opened.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "backend/attention_kernels.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/kernel_table.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "cuda/attention_test_support.h"
#include "cuda/cuda_test_support.h"
#include "memory/device_memory.h"
#include "ops/attention.h"
#include "ops/view_ops.h"

namespace headroom {
namespace {

using cuda::cudnn_attention_stats;
using cuda::CudnnAttentionStats;

#define REQUIRE_CUDNN()                                                                \
  do {                                                                                 \
    REQUIRE_GPU();                                                                     \
    const cuda::CudnnLibraryInfo cudnn = cuda::cudnn_library_info();                   \
    if (!cudnn.loaded)                                                                 \
      GTEST_SKIP() << "cuDNN cannot be opened: skipped (" << cudnn.description << ")"; \
  } while (0)

struct Config {
  int64_t b, hq, hkv, t, s, d;
  bool causal;
  int64_t window = 0;
  bool fused = false;  // q, k, v (and their gradients) heads views of one [B, T, (Hq + 2 Hkv) D]
  float softcap = 0.0f;
  float dropout = 0.0f;
  bool packed = false;  // two sequences a row
};

std::string name_of(const Config& c, DType dtype) {
  return str_cat(dtype_name(dtype), " B", c.b, " Hq", c.hq, " Hkv", c.hkv, " T", c.t, " S", c.s,
                 " D", c.d, c.causal ? " causal" : " full", c.window ? " window " : "",
                 c.window ? std::to_string(c.window) : "", c.fused ? " fused" : "",
                 c.softcap > 0 ? " softcap" : "", c.dropout > 0 ? " dropout" : "",
                 c.packed ? " packed" : "");
}

// The four [B, H, T, D] operands of a problem in one dtype on one device, with the three
// gradients' buffers laid out as the inputs are.
struct Operands {
  Tensor q, k, v, grad_out;
  Tensor grad_q, grad_k, grad_v;
};

// Views (q, k, v) of heads of x: [B, T, (Hq + 2 Hkv) D] as [B, H, T, D] each.
void split_fused(const Tensor& x, const Config& c, Tensor& q, Tensor& k, Tensor& v) {
  auto heads = [&](int64_t first, int64_t count) {
    return x.narrow(2, first * c.d, count * c.d).view({c.b, c.t, count, c.d}).transpose(1, 2);
  };
  q = heads(0, c.hq);
  k = heads(c.hq, c.hkv);
  v = heads(c.hq + c.hkv, c.hkv);
}

// Values drawn once (in the tested dtype's precision) and placed on `device` in `dtype`.
struct Values {
  std::vector<float> fused, q, k, v, grad_out;
};

Values draw(const Config& c, DType dtype) {
  Generator g(11);
  auto values = [&](const Shape& shape) {
    return Tensor::randn(shape, DType::f32, kCPU, &g).to(dtype).to(DType::f32).to_float_vector();
  };
  Values x;
  if (c.fused) {
    x.fused = values({c.b, c.t, (c.hq + 2 * c.hkv) * c.d});
  } else {
    x.q = values({c.b, c.hq, c.t, c.d});
    x.k = values({c.b, c.hkv, c.s, c.d});
    x.v = values({c.b, c.hkv, c.s, c.d});
  }
  x.grad_out = values({c.b, c.hq, c.t, c.d});
  return x;
}

Operands place(const Config& c, const Values& x, DType dtype, Device device) {
  Operands o;
  auto on = [&](const std::vector<float>& values, const Shape& shape) {
    return Tensor::from_floats(values, shape).to(dtype).to(device);
  };
  if (c.fused) {
    split_fused(on(x.fused, {c.b, c.t, (c.hq + 2 * c.hkv) * c.d}), c, o.q, o.k, o.v);
    split_fused(Tensor::empty({c.b, c.t, (c.hq + 2 * c.hkv) * c.d}, dtype, device), c, o.grad_q,
                o.grad_k, o.grad_v);
  } else {
    o.q = on(x.q, {c.b, c.hq, c.t, c.d});
    o.k = on(x.k, {c.b, c.hkv, c.s, c.d});
    o.v = on(x.v, {c.b, c.hkv, c.s, c.d});
    o.grad_q = Tensor::empty(o.q.shape(), dtype, device);
    o.grad_k = Tensor::empty(o.k.shape(), dtype, device);
    o.grad_v = Tensor::empty(o.v.shape(), dtype, device);
  }
  o.grad_out = on(x.grad_out, {c.b, c.hq, c.t, c.d});
  return o;
}

// cu_seqlens of two sequences a row (the first a third of it), on `device` with its host values.
AttentionSequences two_a_row(const Config& c, Device device) {
  if (!c.packed) return {};
  auto host = std::make_shared<std::vector<int32_t>>();
  host->push_back(0);
  for (int64_t row = 0; row < c.b; ++row) {
    host->push_back(static_cast<int32_t>(row * c.t + c.t / 3));
    host->push_back(static_cast<int32_t>((row + 1) * c.t));
  }
  std::vector<int64_t> values(host->begin(), host->end());
  const Tensor cu =
      Tensor::from_ints(values, {static_cast<int64_t>(values.size())}, DType::i32).to(device);
  return {cu, host};
}

struct Result {
  Tensor out, lse, grad_q, grad_k, grad_v;
};

// Forward and backward through `device`'s attention kernel table; `cudnn_forward` /
// `cudnn_backward` say whether cuDNN may take each (on the GPU).
Result run(const Config& c, const Operands& o, Device device, bool cudnn_forward = true,
           bool cudnn_backward = true) {
  const DType dtype = o.q.dtype();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const DropoutParams dropout{c.dropout, 1234, 0};
  const AttentionSequences sequences = two_a_row(c, device);
  Result r;
  // out in q's layout, as the op allocates it.
  r.out = c.fused ? Tensor::empty({c.b, c.t, c.hq, c.d}, dtype, device).transpose(1, 2)
                  : Tensor::empty(o.q.shape(), dtype, device);
  r.lse = Tensor::empty({c.b, c.hq, c.t}, DType::f32, device);
  cuda::set_cudnn_attention_enabled(cudnn_forward);
  need_kernel("test", device, &AttentionKernels::forward)(
      o.q, o.k, o.v, c.causal, c.window, scale, c.softcap, dropout, r.out, r.lse, sequences);
  // The op's workspaces: one allocation, the accumulator then delta (Note [Attention backward
  // workspace]).
  const int64_t rows = c.b * c.hq * c.t;
  Tensor delta, accum;
  if (dtype == DType::f32) {
    delta = Tensor::empty({c.b, c.hq, c.t}, DType::f32, device);
  } else {
    const Tensor workspace = Tensor::empty({rows * (c.d + 1)}, DType::f32, device);
    accum = workspace.narrow(0, 0, rows * c.d).view(o.q.shape());
    delta = workspace.narrow(0, rows * c.d, rows).view({c.b, c.hq, c.t});
  }
  cuda::set_cudnn_attention_enabled(cudnn_backward);
  need_kernel("test", device, &AttentionKernels::backward)(
      o.q, o.k, o.v, r.out, o.grad_out, r.lse, c.causal, c.window, scale, c.softcap, dropout, delta,
      o.grad_q, o.grad_k, o.grad_v, accum, sequences);
  cuda::set_cudnn_attention_enabled(true);
  r.grad_q = o.grad_q;
  r.grad_k = o.grad_k;
  r.grad_v = o.grad_v;
  return r;
}

// The GPU's run of `c` against the CPU kernels' in f32 on the same values; returns how many
// forwards and backwards cuDNN ran meanwhile.
CudnnAttentionStats check_against_cpu(const Config& c, DType dtype, bool cudnn_forward = true,
                                      bool cudnn_backward = true) {
  const std::string name = name_of(c, dtype);
  SCOPED_TRACE(name);
  const Values x = draw(c, dtype);
  const Result want = run(c, place(c, x, DType::f32, kCPU), kCPU);
  const CudnnAttentionStats before = cudnn_attention_stats();
  const Result got = run(c, place(c, x, dtype, kGpu), kGpu, cudnn_forward, cudnn_backward);
  synchronize_gpu();
  CudnnAttentionStats after = cudnn_attention_stats();
  auto host = [](const Tensor& x) { return x.to(kCPU).to(DType::f32).to_float_vector(); };
  // Tolerances of Note [Attention tolerances on the GPU]; a window of one key leaves dQ and dK
  // rounding noise throughout, as there.
  const double noise = c.window == 1 ? 1e-5 : 1e-6;
  expect_close(host(got.out), host(want.out), dtype, name + ": out");
  expect_close(host(got.grad_q), host(want.grad_q), dtype, name + ": grad_q", noise);
  expect_close(host(got.grad_k), host(want.grad_k), dtype, name + ": grad_k", noise);
  expect_close(host(got.grad_v), host(want.grad_v), dtype, name + ": grad_v");
  // lse is f32 on both sides, from the same f32 products: only the sums' order differs.
  expect_close(got.lse, want.lse, Tolerance{1e-5, 1e-5, 1e-5}, name + ": lse");
  after.forward -= before.forward;
  after.backward -= before.backward;
  after.forward_declined -= before.forward_declined;
  after.backward_declined -= before.backward_declined;
  return after;
}

// The case ran forward and backward on cuDNN.
void expect_cudnn(const Config& c, DType dtype) {
  const CudnnAttentionStats ran = check_against_cpu(c, dtype);
  EXPECT_EQ(ran.forward, 1) << name_of(c, dtype) << ": declined: " << ran.last_declined;
  EXPECT_EQ(ran.backward, 1) << name_of(c, dtype) << ": declined: " << ran.last_declined;
}

const DType kDtypes[] = {DType::bf16, DType::f16};

TEST(CudnnAttention, ReportsTheLibrary) {
  REQUIRE_CUDNN();
  // scripts/gpu_check repeats this line in its report.
  std::printf("cuDNN library: %s\n", cuda::cudnn_library_info().description.c_str());
}

TEST(CudnnAttention, MatchesCpuCausalAndFull) {
  REQUIRE_CUDNN();
  for (DType dtype : kDtypes) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {true, false}) expect_cudnn({2, 4, 4, 130, 130, d, causal}, dtype);
    }
  }
}

TEST(CudnnAttention, MatchesCpuWithGroupedQueryHeads) {
  REQUIRE_CUDNN();
  for (DType dtype : kDtypes) {
    for (int64_t d : {64, 128}) {
      expect_cudnn({2, 8, 2, 200, 200, d, true}, dtype);
      expect_cudnn({1, 8, 2, 96, 96, d, false}, dtype);
    }
  }
}

TEST(CudnnAttention, MatchesCpuWithMoreKeysThanQueries) {
  REQUIRE_CUDNN();
  for (DType dtype : kDtypes) {
    expect_cudnn({1, 4, 2, 37, 91, 64, false}, dtype);
    expect_cudnn({2, 2, 2, 91, 37, 128, false}, dtype);
  }
}

TEST(CudnnAttention, ReadsAndWritesViewsOfOneFusedProjection) {
  REQUIRE_CUDNN();
  for (DType dtype : kDtypes) {
    for (int64_t d : {64, 128}) {
      expect_cudnn({2, 8, 2, 128, 128, d, true, 0, true}, dtype);
      expect_cudnn({1, 4, 4, 100, 100, d, false, 0, true}, dtype);
    }
  }
}

TEST(CudnnAttention, SlidingWindowMatchesCpu) {
  REQUIRE_CUDNN();
  for (DType dtype : kDtypes) {
    expect_cudnn({2, 4, 2, 300, 300, 64, true, 5}, dtype);
    expect_cudnn({1, 8, 2, 260, 260, 128, true, 65, true}, dtype);
    expect_cudnn({1, 2, 2, 70, 70, 64, true, 1}, dtype);
  }
}

// Out and lse of either forward are what either backward reads.
TEST(CudnnAttention, ForwardAndBackwardMixWithOurKernels) {
  REQUIRE_CUDNN();
  for (DType dtype : kDtypes) {
    const Config c{2, 8, 2, 150, 150, 64, true, 0, true};
    CudnnAttentionStats ran = check_against_cpu(c, dtype, true, false);
    EXPECT_EQ(ran.forward, 1) << ran.last_declined;
    EXPECT_EQ(ran.backward, 0);
    ran = check_against_cpu(c, dtype, false, true);
    EXPECT_EQ(ran.forward, 0);
    EXPECT_EQ(ran.backward, 1) << ran.last_declined;
  }
}

// What cuDNN must not take runs our kernels, and still matches the CPU.
TEST(CudnnAttention, DeclinedProblemsMatchCpu) {
  REQUIRE_CUDNN();
  const std::vector<std::pair<Config, DType>> cases = {
      {{2, 4, 2, 100, 100, 64, true}, DType::f32},
      {{2, 4, 2, 100, 100, 64, true, 0, false, 0.0f, 0.1f}, DType::bf16},
      {{1, 4, 4, 90, 90, 64, false, 0, false, 0.0f, 0.2f}, DType::f16},
      {{2, 4, 2, 100, 100, 64, true, 0, false, 30.0f}, DType::bf16},
      {{2, 4, 2, 96, 96, 64, true, 0, false, 0.0f, 0.0f, true}, DType::bf16},
      {{1, 2, 2, 70, 70, 36, true}, DType::f16},  // head size not a multiple of 8
  };
  for (const auto& [c, dtype] : cases) {
    const CudnnAttentionStats ran = check_against_cpu(c, dtype);
    EXPECT_EQ(ran.forward, 0) << name_of(c, dtype);
    EXPECT_EQ(ran.backward, 0) << name_of(c, dtype);
    EXPECT_EQ(ran.forward_declined, 1) << name_of(c, dtype);
    EXPECT_EQ(ran.backward_declined, 1) << name_of(c, dtype);
  }
}

// Through the op and autograd: q, k and v as heads views of [B, T, H, D] projections (one fused
// [B, T, (Hq + 2 Hkv) D] buffer), backward in two calls of four query heads each (Note [Attention
// backward by head groups]), each on cuDNN.
TEST(CudnnAttention, TheOpRunsItsHeadGroupsOnCudnn) {
  REQUIRE_CUDNN();
  const int64_t b = 2, hq = 8, hkv = 2, t = 128, d = 64;
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator g(5);
    const Tensor qkv = Tensor::randn({b, t, (hq + 2 * hkv) * d}, DType::f32, kCPU, &g).to(dtype);
    const Tensor grad = Tensor::randn({b, hq, t, d}, DType::f32, kCPU, &g).to(dtype);
    auto run_on = [&](Device device, DType as) {
      const Tensor x = qkv.to(as).to(device).set_requires_grad(true);
      auto heads = [&](int64_t first, int64_t count) {
        return transpose(reshape(narrow(x, 2, first * d, count * d), {b, t, count, d}), 1, 2);
      };
      // Half the group's accumulator: two backward calls.
      const AttentionAccumulatorBudget budget(b * hq * t * d * 4 / 2);
      const Tensor out =
          scaled_dot_product_attention(heads(0, hq), heads(hq, hkv), heads(hq + hkv, hkv), true);
      backward(out, grad.to(as).to(device));
      auto host = [](const Tensor& y) { return y.to(kCPU).to(DType::f32).to_float_vector(); };
      return std::make_pair(host(out), host(x.grad()));
    };
    const auto want = run_on(kCPU, DType::f32);
    const CudnnAttentionStats before = cudnn_attention_stats();
    const auto got = run_on(kGpu, dtype);
    const CudnnAttentionStats after = cudnn_attention_stats();
    expect_close(got.first, want.first, dtype, "out");
    expect_close(got.second, want.second, dtype, "grad of the projection");
    EXPECT_EQ(after.forward - before.forward, 1) << after.last_declined;
    EXPECT_EQ(after.backward - before.backward, 2) << after.last_declined;
  }
}

// Peak allocated bytes of one forward and backward through the op on `device`, the inputs and
// grad_out excluded.
int64_t step_peak(const Config& c, DType dtype, Device device) {
  const Tensor q = Tensor::zeros({c.b, c.hq, c.t, c.d}, dtype, device).set_requires_grad(true);
  const Tensor k = Tensor::zeros({c.b, c.hkv, c.s, c.d}, dtype, device).set_requires_grad(true);
  const Tensor v = Tensor::zeros({c.b, c.hkv, c.s, c.d}, dtype, device).set_requires_grad(true);
  const Tensor grad = Tensor::ones({c.b, c.hq, c.t, c.d}, dtype, device);
  const int64_t before = static_cast<int64_t>(memory_allocated(device));
  reset_peak_memory_stats(device);
  {
    const Tensor out = scaled_dot_product_attention(q, k, v, c.causal);
    backward(out, grad);
  }
  return static_cast<int64_t>(max_memory_allocated(device)) - before;
}

// cuDNN allocates nothing of its own: the GPU's peak is the meta dry run's to the byte.
TEST(CudnnAttention, AllocatesWhatAMetaDryRunPredicts) {
  REQUIRE_CUDNN();
  for (DType dtype : kDtypes) {
    for (const Config& c :
         {Config{2, 4, 2, 130, 130, 64, true}, Config{1, 8, 8, 256, 256, 128, false}}) {
      const CudnnAttentionStats before = cudnn_attention_stats();
      const int64_t gpu = step_peak(c, dtype, kGpu);
      const CudnnAttentionStats after = cudnn_attention_stats();
      EXPECT_EQ(after.forward - before.forward, 1) << after.last_declined;
      EXPECT_EQ(after.backward - before.backward, 1) << after.last_declined;
      EXPECT_EQ(step_peak(c, dtype, kMeta), gpu) << name_of(c, dtype);
    }
  }
}

}  // namespace
}  // namespace headroom
