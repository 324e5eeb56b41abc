// Autocast: the op policy, gradients reaching fp32 parameters, the cast cache (its bytes through
// allocator statistics), nesting, thread-locality, backward outside the policy, and the meta
// device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/kernel_census.h"
#include "core/grad_mode.h"
#include "memory/device_memory.h"
#include "memory/memory_history.h"
#include "ops/autocast.h"
#include "ops/cast.h"
#include "ops/ops.h"

namespace headroom {
namespace {

Tensor parameter(const Shape& shape, Device device = kCPU, uint64_t seed = 1) {
  Generator gen(seed);
  Tensor t = device.type == DeviceType::meta ? Tensor::empty(shape, DType::f32, device)
                                             : Tensor::randn(shape, DType::f32, device, &gen);
  t.set_requires_grad(true);
  return t;
}

TEST(Autocast, PolicyPicksEachOpsDtype) {
  const Tensor x = Tensor::randn({4, 64});
  const Tensor w = parameter({32, 64});
  const Tensor ln_w = parameter({64});
  Autocast region(DeviceType::cpu);
  const Tensor y = linear(x, w);
  EXPECT_EQ(y.dtype(), DType::bf16);          // lower precision
  EXPECT_EQ(softmax(y).dtype(), DType::f32);  // fp32
  EXPECT_EQ(sum(y).dtype(), DType::f32);      // fp32
  EXPECT_EQ(mean(y, 0).dtype(), DType::f32);  // fp32
  EXPECT_EQ(layer_norm(linear(x, parameter({64, 64})), ln_w, Tensor()).dtype(), DType::f32);
  EXPECT_EQ(rms_norm(cast(x, DType::bf16), ln_w).dtype(), DType::f32);
  EXPECT_EQ(add(y, Tensor::zeros({4, 32})).dtype(), DType::f32);  // promote
  EXPECT_EQ(add(y, y).dtype(), DType::bf16);
  EXPECT_EQ(gelu(y).dtype(), DType::bf16);  // not listed: input dtype
  EXPECT_EQ(matmul(x, transpose(x, 0, 1)).dtype(), DType::bf16);
  // torch's bmm: batched operands go through matmul.
  const Tensor batched = Tensor::randn({3, 4, 16});
  EXPECT_EQ(matmul(batched, transpose(batched, 1, 2)).dtype(), DType::bf16);
  // Attention: fp32 q, k, v are cast and the output is bf16.
  const Tensor q = Tensor::randn({1, 2, 8, 16}), kv = Tensor::randn({1, 2, 8, 16});
  EXPECT_EQ(scaled_dot_product_attention(q, kv, kv).dtype(), DType::bf16);
  {
    Autocast f16(DeviceType::cpu, DType::f16);
    EXPECT_EQ(scaled_dot_product_attention(q, kv, kv).dtype(), DType::f16);
  }
  EXPECT_EQ(cross_entropy(y, Tensor::from_ints({0, 1, 2, 3}, {4})).dtype(), DType::f32);
  EXPECT_EQ(autocast_policy("linear"), AutocastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy("layer_norm"), AutocastPolicy::fp32);
  EXPECT_EQ(autocast_policy("add"), AutocastPolicy::promote);
  EXPECT_EQ(autocast_policy("scaled_dot_product_attention"), AutocastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy("gelu"), std::nullopt);
}

// torch's autocast state is thread-local: a thread started inside a region runs its ops in their
// inputs' dtype and starts with an empty cast cache; its own region casts and caches for itself,
// and the starting thread's region and cache are untouched.
TEST(Autocast, AThreadStartedInsideARegionHasAutocastOffAndAnEmptyCache) {
  const Tensor x = Tensor::randn({4, 64});
  const Tensor w = parameter({32, 64});
  Autocast region(DeviceType::cpu);
  (void)linear(x, w);
  const AutocastCacheStats here = autocast_cache_stats();
  ASSERT_EQ(here.entries, 1);
  bool enabled = true;
  int nesting = -1;
  AutocastCacheStats at_start, in_own_region;
  DType outside = DType::bf16, inside = DType::f32;
  std::thread([&] {
    enabled = AutocastMode::any_enabled() || AutocastMode::get(DeviceType::cpu).enabled;
    nesting = AutocastMode::nesting();
    at_start = autocast_cache_stats();
    outside = linear(x, w).dtype();
    Autocast own(DeviceType::cpu);
    inside = linear(x, w).dtype();
    (void)linear(x, w);
    in_own_region = autocast_cache_stats();
  }).join();
  EXPECT_FALSE(enabled);
  EXPECT_EQ(nesting, 0);
  EXPECT_EQ(at_start.entries, 0);
  EXPECT_EQ(at_start.bytes, 0u);
  EXPECT_EQ(at_start.hits, 0);
  EXPECT_EQ(at_start.misses, 0);
  EXPECT_EQ(outside, DType::f32);
  EXPECT_EQ(inside, DType::bf16);
  EXPECT_EQ(in_own_region.misses, 1);  // w cast once in the thread's region, then reused
  EXPECT_EQ(in_own_region.hits, 1);
  EXPECT_EQ(in_own_region.entries, 1);
  const AutocastCacheStats after = autocast_cache_stats();
  EXPECT_EQ(after.entries, here.entries);
  EXPECT_EQ(after.hits, here.hits);
  EXPECT_EQ(after.misses, here.misses);
  EXPECT_TRUE(AutocastMode::get(DeviceType::cpu).enabled);
  EXPECT_EQ(AutocastMode::nesting(), 1);
}

TEST(Autocast, OffOutsideTheRegionAndForOtherDevicesAndWhenDisabled) {
  const Tensor x = Tensor::randn({4, 64});
  const Tensor w = parameter({32, 64});
  EXPECT_EQ(linear(x, w).dtype(), DType::f32);
  {
    Autocast meta_only(DeviceType::meta);
    EXPECT_EQ(linear(x, w).dtype(), DType::f32);
  }
  Autocast region(DeviceType::cpu, DType::f16);
  EXPECT_EQ(linear(x, w).dtype(), DType::f16);
  {
    Autocast off(DeviceType::cpu, std::nullopt, /*enabled=*/false);
    EXPECT_EQ(linear(x, w).dtype(), DType::f32);
  }
  EXPECT_EQ(linear(x, w).dtype(), DType::f16);
}

// torch.autocast("cuda") defaults to f16, and its op lists are the table's (Note [Autocast
// policy]): amp.rst's CUDA lists put these ops in the low dtype, in fp32, or leave them alone.
TEST(Autocast, CudaRegionsDefaultToF16AndFollowTheCudaLists) {
  {
    Autocast region(DeviceType::cuda);
    EXPECT_TRUE(AutocastMode::get(DeviceType::cuda).enabled);
    EXPECT_EQ(AutocastMode::get(DeviceType::cuda).dtype, DType::f16);
    EXPECT_FALSE(AutocastMode::get(DeviceType::cpu).enabled);
  }
  EXPECT_FALSE(AutocastMode::get(DeviceType::cuda).enabled);
  for (const char* op : {"linear", "matmul", "scaled_dot_product_attention"}) {
    EXPECT_EQ(autocast_policy(op), AutocastPolicy::lower_precision) << op;
  }
  for (const char* op : {"softmax", "layer_norm", "cross_entropy", "sum"}) {
    EXPECT_EQ(autocast_policy(op), AutocastPolicy::fp32) << op;
  }
  for (const char* op : {"gelu", "silu", "embedding", "dropout", "rotary_embedding"}) {
    EXPECT_EQ(autocast_policy(op), std::nullopt) << op;
  }
}

TEST(Autocast, RejectsDtypesOtherThanBf16AndF16) {
  try {
    Autocast region(DeviceType::cpu, DType::f32);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("only bf16 and f16"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(AutocastMode::get(DeviceType::cpu).enabled);
  EXPECT_EQ(AutocastMode::nesting(), 0);
}

TEST(Autocast, GradientsReachFp32ParametersAsFp32) {
  const Tensor x = Tensor::randn({8, 64});
  const Tensor w = parameter({16, 64});
  const Tensor b = parameter({16}, kCPU, 2);
  Tensor loss;
  {
    Autocast region(DeviceType::cpu);
    loss = sum(linear(x, w, b));
  }
  backward(loss);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
  // d sum / d w[j][i] = sum over rows of x[:, i] rounded to bf16 (x is cast; the gradient of a
  // sum is 1, exact in bf16), and the bias gradient is the row count.
  const Tensor expected = sum(cast(x, DType::bf16).to(DType::f32), 0);
  const std::vector<float> gw = w.grad().to_float_vector();
  const std::vector<float> e = expected.to_float_vector();
  for (int64_t j = 0; j < 16; ++j) {
    for (int64_t i = 0; i < 64; ++i) {
      EXPECT_NEAR(gw[j * 64 + i], e[i], std::abs(e[i]) * 1e-2 + 1e-2) << j << "," << i;
    }
  }
  for (float v : b.grad().to_float_vector()) EXPECT_EQ(v, 8.0f);
}

TEST(Autocast, CastCacheCastsEachParameterOncePerRegion) {
  // x needs a gradient, so each linear keeps its bf16 weight for dx (a linear whose input needs
  // none keeps no weight); x is no leaf, so its casts are not cached.
  const Tensor x = scale(Tensor::randn({4, 256}).set_requires_grad(true), 1.0);
  const Tensor w = parameter({256, 256});
  const size_t w_bf16 = 256 * 256 * 2;
  const AutocastCacheStats before = autocast_cache_stats();

  auto extra_bytes = [&](bool cache_enabled) {
    const size_t base = memory_allocated(kCPU);
    std::vector<Tensor> outputs;
    Autocast region(DeviceType::cpu, std::nullopt, true, cache_enabled);
    for (int i = 0; i < 3; ++i) outputs.push_back(linear(x, w));
    return memory_allocated(kCPU) - base;
  };
  const size_t cached = extra_bytes(true);
  const AutocastCacheStats after = autocast_cache_stats();
  EXPECT_EQ(after.misses - before.misses, 1);
  EXPECT_EQ(after.hits - before.hits, 2);
  EXPECT_EQ(after.entries, 0);  // cleared at the region's exit
  const size_t uncached = extra_bytes(false);
  // Two more bf16 copies of w without the cache; everything else (x's casts, outputs) equal.
  EXPECT_EQ(uncached - cached, 2 * w_bf16);
  EXPECT_EQ(autocast_cache_stats().misses, after.misses);
}

TEST(Autocast, CacheLivesUntilTheOutermostRegionExits) {
  const Tensor w = parameter({256, 256});
  const Tensor x = Tensor::randn({2, 256});
  const size_t base = memory_allocated(kCPU);
  {
    Autocast outer(DeviceType::cpu);
    {
      Autocast inner(DeviceType::cpu);
      (void)linear(x, w);
    }
    EXPECT_EQ(autocast_cache_stats().entries, 1);
    EXPECT_EQ(autocast_cache_stats().bytes, 256u * 256u * 2u);
    EXPECT_EQ(memory_allocated(kCPU) - base, 256u * 256u * 2u);
    (void)linear(x, w);
    EXPECT_EQ(autocast_cache_stats().entries, 1);
  }
  EXPECT_EQ(autocast_cache_stats().entries, 0);
  EXPECT_EQ(memory_allocated(kCPU), base);
}

// The casts the cache alone holds (here all of them: no_grad saves nothing) are freed when the
// region exits, in the order they were made, not in the order of the parameters' heap
// addresses: the same on every run, and on the meta device as on the CPU (plan/).
TEST(Autocast, ExitFreesTheCachedCastsInTheOrderTheyWereMade) {
  const Tensor x = Tensor::randn({2, 64});
  std::vector<Tensor> weights;
  for (int64_t i = 0; i < 6; ++i) weights.push_back(parameter({64 * (i + 1), 64}));
  const std::vector<int> order = {3, 0, 5, 1, 4, 2};  // unlike the parameters' creation order
  record_memory_history(1000);
  const size_t from = caching_allocator(kCPU).trace().size();
  {
    NoGradGuard no_grad;
    Autocast region(DeviceType::cpu);
    for (int i : order) (void)linear(x, weights[static_cast<size_t>(i)]);
  }
  const std::vector<TraceEntry> trace = caching_allocator(kCPU).trace();
  record_memory_history(0);
  std::vector<size_t> freed_casts;  // bf16 weights: 64 (i + 1) x 64 x 2 bytes
  for (size_t i = from; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (e.action == TraceEntry::Action::free_requested && e.size % 8192 == 0) {
      freed_casts.push_back(e.size / 8192 - 1);
    }
  }
  EXPECT_EQ(freed_casts, (std::vector<size_t>{3, 0, 5, 1, 4, 2}));
}

TEST(Autocast, OnlyFp32LeavesThatRequireGradAreCached) {
  const Tensor constant = Tensor::randn({256, 256});  // no grad: cast each time
  const Tensor x = Tensor::randn({2, 256});
  Autocast region(DeviceType::cpu);
  (void)linear(x, constant);
  (void)linear(x, cast(parameter({256, 256}), DType::f16));  // not f32, not a leaf
  EXPECT_EQ(autocast_cache_stats().entries, 0);
}

TEST(Autocast, CastsRecordedWithoutGradAreNotReusedWithGrad) {
  const Tensor w = parameter({64, 64});
  const Tensor x = Tensor::randn({2, 64});
  Autocast region(DeviceType::cpu);
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(linear(x, w).requires_grad());
  }
  const Tensor y = linear(x, w);
  EXPECT_TRUE(y.requires_grad());
  backward(sum(y));
  EXPECT_TRUE(w.grad().defined());
}

TEST(Autocast, BackwardInsideARegionKeepsTheForwardDtypes) {
  const Tensor w = parameter({64, 64});
  const Tensor x = Tensor::randn({4, 64});
  Autocast region(DeviceType::cpu);
  const Tensor h = linear(x, w);        // bf16
  const Tensor loss = sum(softmax(h));  // fp32 softmax over a cast of h
  backward(loss);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_TRUE(AutocastMode::get(DeviceType::cpu).enabled);
}

TEST(Autocast, MetaDeviceAllocatesAsTheCpuDoes) {
  auto run = [](Device device) {
    const Tensor w1 = parameter({128, 256}, device);
    const Tensor w2 = parameter({256, 128}, device);
    const Tensor x = device.type == DeviceType::meta ? Tensor::empty({32, 128}, DType::f32, device)
                                                     : Tensor::randn({32, 128});
    reset_peak_memory_stats(device);
    const size_t base = memory_allocated(device);
    Tensor loss;
    {
      Autocast region(device.type);
      loss = mean(linear(gelu(linear(x, w2)), w1));
    }
    const size_t after_forward = memory_allocated(device) - base;
    backward(loss);
    return std::pair{after_forward, max_memory_allocated(device) - base};
  };
  EXPECT_EQ(run(kCPU), run(Device{DeviceType::meta, 0}));
}

// Launches of `family` ("cast", "elementwise", ...) in a census, of `entry` when given.
int64_t launches_of(const KernelCensus& census, const std::string& family,
                    const std::string& entry = "") {
  int64_t n = 0;
  for (const KernelLaunch& launch : census.launches()) {
    n += family == launch.family && (entry.empty() || entry == launch.entry);
  }
  return n;
}

// The weight's and bias's gradients of an autocast linear come out of the GEMM and the column sum
// in fp32 (BackwardContext::grad_dtype): not rounded to bf16 and widened again, so backward
// launches no cast, and dW is the fp32 sum of the bf16 products, to fp32's precision (a bf16
// round trip is off by up to 2^-9 of it).
TEST(Autocast, GradientsOfCastWeightsAreWrittenInFp32) {
  Generator gen(3);
  const Tensor x = Tensor::randn({8, 64}, DType::f32, kCPU, &gen);
  const Tensor w = parameter({16, 64});
  const Tensor b = parameter({16}, kCPU, 2);
  const Tensor g = Tensor::randn({8, 16}, DType::f32, kCPU, &gen);
  Tensor y;
  {
    Autocast region(DeviceType::cpu);
    y = linear(x, w, b);
  }
  const Tensor grad = g.to(DType::bf16);
  KernelCensus census;
  {
    KernelCensusScope scope(census);
    backward(y, grad);
  }
  EXPECT_EQ(launches_of(census, "cast"), 0);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  const std::vector<float> xb = x.to(DType::bf16).to_float_vector();
  const std::vector<float> gb = g.to(DType::bf16).to_float_vector();
  const std::vector<float> gw = w.grad().to_float_vector();
  const std::vector<float> gbias = b.grad().to_float_vector();
  for (int64_t j = 0; j < 16; ++j) {
    double bias = 0.0, scale_sum = 0.0;
    for (int64_t r = 0; r < 8; ++r) bias += gb[r * 16 + j];
    for (int64_t i = 0; i < 64; ++i) {
      double e = 0.0, magnitude = 0.0;
      for (int64_t r = 0; r < 8; ++r) {
        e += double{gb[r * 16 + j]} * xb[r * 64 + i];
        magnitude += std::abs(double{gb[r * 16 + j]} * xb[r * 64 + i]);
      }
      scale_sum += magnitude;
      EXPECT_NEAR(gw[j * 64 + i], e, magnitude * 1e-6 + 1e-30) << j << "," << i;
    }
    EXPECT_NEAR(gbias[j], bias, 1e-6 * (std::abs(bias) + 1.0)) << j;
    EXPECT_GT(scale_sum, 0.0);
  }
}

// A bf16 branch added to the fp32 residual stream takes the add's fp32 gradient through its
// dropout unrounded: the mask and scale are applied in fp32 and the result rounded to bf16 once
// (DropoutBackward0 accepts fp32), with no cast launched between the add and the dropout.
TEST(Autocast, DropoutOfABranchTakesTheResidualGradientInFp32) {
  Generator gen(11);
  Tensor x = Tensor::randn({3, 1031}, DType::f32, kCPU, &gen).to(DType::bf16);
  x.set_requires_grad();
  const Tensor residual = Tensor::randn({3, 1031}, DType::f32, kCPU, &gen);
  // Gradients with bits below bf16's precision, so a rounding before the scale would show.
  const Tensor dy = Tensor::randn({3, 1031}, DType::f32, kCPU, &gen);
  const Tensor branch = dropout(x, 0.3, true, &gen);
  const Tensor y = add(residual, branch);
  ASSERT_EQ(y.dtype(), DType::f32);
  KernelCensus census;
  {
    KernelCensusScope scope(census);
    backward(y, dy);
  }
  EXPECT_EQ(launches_of(census, "cast"), 0);
  ASSERT_EQ(x.grad().dtype(), DType::bf16);
  const std::vector<float> kept = branch.to_float_vector(), dyv = dy.to_float_vector();
  const float scale = static_cast<float>(1.0 / 0.7);
  const auto to_bf16 = [](const std::vector<float>& v) {
    return Tensor::from_floats(v, {static_cast<int64_t>(v.size())})
        .to(DType::bf16)
        .to_float_vector();
  };
  const std::vector<float> rounded = to_bf16(dyv);
  std::vector<float> once(dyv.size()), twice(dyv.size());
  for (size_t i = 0; i < dyv.size(); ++i) {
    once[i] = kept[i] != 0.0f ? dyv[i] * scale : 0.0f;
    twice[i] = kept[i] != 0.0f ? rounded[i] * scale : 0.0f;
  }
  const std::vector<float> gx = x.grad().to_float_vector(), e = to_bf16(once);
  const std::vector<float> e2 = to_bf16(twice);
  int64_t once_differs_from_twice = 0;
  for (size_t i = 0; i < gx.size(); ++i) {
    ASSERT_EQ(gx[i], e[i]) << "element " << i;
    once_differs_from_twice += e2[i] != e[i];
  }
  EXPECT_GT(once_differs_from_twice, 0) << "the test cannot tell one rounding from two";
}

// A norm whose result three projections convert to bf16 (Llama's q, k, v) writes bf16 itself:
// the values and every gradient of the norm followed by the casts, bit for bit, with none of the
// three activation casts launched (in forward or backward) and one bf16 tensor kept for the
// three projections instead of three copies and the fp32 result.
TEST(Autocast, ANormWritingItsProjectionsDtypeIsTheNormThenTheirCasts) {
  for (bool centred : {true, false}) {
    struct Run {
      std::vector<std::vector<float>> values;
      int64_t forward_casts = 0, backward_casts = 0, kept_bytes = 0;
    };
    auto run = [&](bool narrowed) {
      Generator gen(5);
      Tensor x = Tensor::randn({37, 96}, DType::f32, kCPU, &gen).set_requires_grad();
      Tensor w = Tensor::randn({96}, DType::f32, kCPU, &gen).set_requires_grad();
      Tensor b = Tensor::randn({96}, DType::f32, kCPU, &gen).set_requires_grad();
      std::vector<Tensor> weights;
      for (int i = 0; i < 3; ++i)
        weights.push_back(Tensor::randn({40, 96}, DType::f32, kCPU, &gen).set_requires_grad());
      const Tensor dy = Tensor::randn({37, 40}, DType::f32, kCPU, &gen).to(DType::bf16);
      Run r;
      Tensor sum;
      {
        Autocast region(DeviceType::cpu, DType::bf16);
        const std::optional<DType> out_dtype =
            narrowed ? std::optional<DType>(DType::bf16) : std::nullopt;
        const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
        KernelCensus forward, backward_census;
        {
          KernelCensusScope scope(forward);
          const Tensor h =
              centred ? layer_norm(x, w, b, 1e-5, out_dtype) : rms_norm(x, w, 1e-6, out_dtype);
          EXPECT_EQ(h.dtype(), narrowed ? DType::bf16 : DType::f32);
          for (const Tensor& wi : weights) {
            const Tensor y = linear(h, wi, Tensor());
            sum = sum.defined() ? add(sum, y) : y;
          }
          r.kept_bytes = static_cast<int64_t>(memory_allocated(kCPU)) - before;
        }
        {
          KernelCensusScope scope(backward_census);
          backward(sum, dy);
        }
        r.forward_casts = launches_of(forward, "cast");
        r.backward_casts = launches_of(backward_census, "cast");
      }
      r.values = {sum.to_float_vector(), x.grad().to_float_vector(), w.grad().to_float_vector()};
      if (centred) r.values.push_back(b.grad().to_float_vector());
      for (const Tensor& wi : weights) r.values.push_back(wi.grad().to_float_vector());
      return r;
    };
    const Run fused = run(true), casts = run(false);
    ASSERT_EQ(fused.values.size(), casts.values.size());
    for (size_t i = 0; i < fused.values.size(); ++i) {
      EXPECT_EQ(fused.values[i], casts.values[i]) << "result " << i;
    }
    // Both cast the three weights; only the unfused one casts the norm's result three times.
    EXPECT_EQ(casts.forward_casts, 6);
    EXPECT_EQ(fused.forward_casts, 3);
    EXPECT_EQ(casts.backward_casts, 0);
    EXPECT_EQ(fused.backward_casts, 0);
    // Blocks of the allocator are multiples of 512 bytes.
    const auto block = [](int64_t bytes) { return (bytes + 511) / 512 * 512; };
    EXPECT_EQ(casts.kept_bytes - fused.kept_bytes,
              3 * block(37 * 96 * 2) + block(37 * 96 * 4) - block(37 * 96 * 2));
  }
}

// Prefetched casts (one list launch for all the weights) are the casts the forward would have
// made one at a time: the same outputs and gradients bit for bit, the same cache entries, and
// the forward itself casts nothing more.
TEST(Autocast, PrefetchedCastsEqualTheLazyOnesInOneLaunch) {
  Generator gen(5);
  const Tensor x = Tensor::randn({6, 32}, DType::f32, kCPU, &gen);
  const std::vector<Tensor> lazy = {parameter({48, 32}, kCPU, 7), parameter({48}, kCPU, 8),
                                    parameter({8, 48}, kCPU, 9)};
  std::vector<Tensor> early;
  for (const Tensor& p : lazy) early.push_back(p.detach().clone().set_requires_grad(true));
  auto forward = [&](const std::vector<Tensor>& p) {
    return sum(linear(gelu(linear(x, p[0], p[1])), p[2]));
  };
  Tensor lazy_loss, early_loss;
  std::vector<Tensor> sources;
  KernelCensus census;
  {
    Autocast region(DeviceType::cpu);
    lazy_loss = forward(lazy);
  }
  {
    Autocast region(DeviceType::cpu);
    const AutocastCacheStats before = autocast_cache_stats();
    KernelCensusScope scope(census);
    prefetch_autocast_casts({early[0], early[1], early[2], early[0]});  // a repeat is cast once
    EXPECT_EQ(autocast_cache_stats().misses - before.misses, 3);
    early_loss = forward(early);
    EXPECT_EQ(autocast_cache_stats().hits - before.hits, 3);
    sources = autocast_cached_sources();
  }
  EXPECT_EQ(launches_of(census, "elementwise", "cast_list"), 1);
  EXPECT_EQ(launches_of(census, "cast"), 2);  // x and the sum's input, which are no leaves
  ASSERT_EQ(sources.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(sources[i].autograd_meta(), early[i].autograd_meta());
  EXPECT_EQ(early_loss.to_float_vector(), lazy_loss.to_float_vector());
  backward(lazy_loss);
  backward(early_loss);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(early[i].grad().to_float_vector(), lazy[i].grad().to_float_vector()) << i;
  }
  // Outside a region nothing is cast.
  prefetch_autocast_casts(early);
  EXPECT_EQ(autocast_cache_stats().entries, 0);
}

}  // namespace
}  // namespace headroom
