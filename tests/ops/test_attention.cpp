// scaled_dot_product_attention and rotary_embedding beyond the harness: a materialised reference
// in double (outputs, log-sum-exp, gradients, the dropout mask), the memory kept for backward,
// both backward schedules, error messages, and PyTorch golden values
// (tools/gen_attention_golden.py).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "autograd/engine.h"
#include "backend/cpu/attention.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/kernel_census.h"
#include "core/philox.h"
#include "memory/device_memory.h"
#include "ops/ops.h"

namespace headroom {
namespace {

struct Dims {
  int64_t b, hq, hkv, tq, tk, d;
};

struct Reference {
  std::vector<double> out, lse, grad_q, grad_k, grad_v;
};

// Softmax(q k^T * scale) v with the probabilities materialised, and its gradients, in double.
// keep[(((b * hq + h) * tq + i) * tk + j)] scales each probability after the softmax (dropout).
// A window w (causal) keeps keys j with i - j < w, as transformers' sliding window.
Reference reference_attention(const Dims& s, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<float>& grad_out, bool causal, double scale,
                              const std::vector<float>& keep = {}, int64_t window = 0) {
  Reference r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(s.b * s.hq * s.tq, 0.0);
  r.grad_q.assign(q.size(), 0.0);
  r.grad_k.assign(k.size(), 0.0);
  r.grad_v.assign(v.size(), 0.0);
  const int64_t group = s.hq / s.hkv;
  std::vector<double> p(s.tk), dp(s.tk);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.hq; ++h) {
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < s.tq; ++i) {
        const int64_t qi = ((b * s.hq + h) * s.tq + i) * s.d;
        const int64_t n = causal ? i + 1 : s.tk;
        const int64_t first = window > 0 ? std::max<int64_t>(i - window + 1, 0) : 0;
        double mx = -INFINITY;
        for (int64_t j = first; j < n; ++j) {
          const int64_t kj = ((b * s.hkv + kvh) * s.tk + j) * s.d;
          double dot = 0.0;
          for (int64_t e = 0; e < s.d; ++e) dot += static_cast<double>(q[qi + e]) * k[kj + e];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = first; j < n; ++j) sum += std::exp(p[j] - mx);
        r.lse[(b * s.hq + h) * s.tq + i] = mx + std::log(sum);
        double delta = 0.0;
        for (int64_t j = first; j < n; ++j) {
          const int64_t kj = ((b * s.hkv + kvh) * s.tk + j) * s.d;
          p[j] = std::exp(p[j] - mx) / sum;
          const double kp = keep.empty() ? 1.0 : keep[((b * s.hq + h) * s.tq + i) * s.tk + j];
          double dz = 0.0;
          for (int64_t e = 0; e < s.d; ++e) {
            r.out[qi + e] += p[j] * kp * v[kj + e];
            r.grad_v[kj + e] += p[j] * kp * grad_out[qi + e];
            dz += static_cast<double>(grad_out[qi + e]) * v[kj + e];
          }
          dp[j] = dz * kp;
          delta += p[j] * dp[j];
        }
        for (int64_t j = first; j < n; ++j) {
          const int64_t kj = ((b * s.hkv + kvh) * s.tk + j) * s.d;
          const double ds = p[j] * (dp[j] - delta) * scale;
          for (int64_t e = 0; e < s.d; ++e) {
            r.grad_q[qi + e] += ds * k[kj + e];
            r.grad_k[kj + e] += ds * q[qi + e];
          }
        }
      }
    }
  }
  return r;
}

// The kernels sum in fp32 in their own order against a double reference: a relative bound on
// each element plus one on the largest magnitude (entries that cancel to near zero), and a floor
// of fp32 rounding noise.
void expect_close(const std::vector<float>& actual, const std::vector<double>& expected, double tol,
                  const std::string& what, double floor = 1e-7) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double largest = 0.0;
  for (double e : expected) largest = std::max(largest, std::abs(e));
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tol * (std::abs(expected[i]) + largest) + floor)
        << what << ", element " << i;
  }
}

struct Inputs {
  Tensor q, k, v, grad_out;
};

Inputs random_inputs(const Dims& s, uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  in.q = Tensor::randn({s.b, s.hq, s.tq, s.d}, DType::f32, kCPU, &gen);
  in.k = Tensor::randn({s.b, s.hkv, s.tk, s.d}, DType::f32, kCPU, &gen);
  in.v = Tensor::randn({s.b, s.hkv, s.tk, s.d}, DType::f32, kCPU, &gen);
  in.grad_out = Tensor::randn({s.b, s.hq, s.tq, s.d}, DType::f32, kCPU, &gen);
  for (Tensor* t : {&in.q, &in.k, &in.v}) t->set_requires_grad(true);
  return in;
}

// Runs forward and backward; returns out, grad_q, grad_k, grad_v.
std::vector<std::vector<float>> run_attention(const Inputs& in, bool causal,
                                              std::optional<double> scale = {},
                                              double dropout_p = 0.0, Generator* gen = nullptr,
                                              std::optional<int64_t> window = {}) {
  for (const Tensor* t : {&in.q, &in.k, &in.v}) t->set_grad(Tensor());
  Tensor out =
      scaled_dot_product_attention(in.q, in.k, in.v, causal, scale, dropout_p, gen, window);
  backward(out, in.grad_out);
  return {out.to_float_vector(), in.q.grad().to_float_vector(), in.k.grad().to_float_vector(),
          in.v.grad().to_float_vector()};
}

TEST(Attention, MatchesMaterialisedReference) {
  const struct {
    Dims dims;
    bool causal;
  } cases[] = {
      {{2, 4, 2, 70, 70, 16}, true},   {{1, 6, 3, 130, 130, 64}, true},
      {{2, 2, 2, 33, 150, 32}, false}, {{1, 4, 1, 64, 64, 8}, true},
      {{1, 2, 2, 1, 1, 8}, true},      {{2, 4, 4, 129, 65, 16}, false},
      {{1, 2, 1, 40, 600, 16}, false}, {{1, 2, 2, 300, 300, 16}, true},
  };
  for (const auto& c : cases) {
    const Dims& s = c.dims;
    const Inputs in = random_inputs(s, 11 + s.tq);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
    const Reference ref =
        reference_attention(s, in.q.to_float_vector(), in.k.to_float_vector(),
                            in.v.to_float_vector(), in.grad_out.to_float_vector(), c.causal, scale);
    const auto got = run_attention(in, c.causal);
    // str_cat, not operator+ on std::string: GCC 12 warns falsely (-Wrestrict) on that chain.
    const std::string name =
        str_cat("B", s.b, " Hq", s.hq, " Hkv", s.hkv, " Tq", s.tq, " Tk", s.tk, " D", s.d);
    expect_close(got[0], ref.out, 2e-5, name + " out");
    expect_close(got[1], ref.grad_q, 2e-5, name + " grad_q");
    expect_close(got[2], ref.grad_k, 2e-5, name + " grad_k");
    expect_close(got[3], ref.grad_v, 2e-5, name + " grad_v");
  }
}

// The sliding window inside the kernels: windows shorter than a tile, spanning several, one key
// (self only), and one as long as the sequence (no mask), over both backward schedules (one kv
// head per thread, or split key tiles; Note [Attention backward schedules]).
TEST(Attention, SlidingWindowMatchesMaterialisedReference) {
  const struct {
    Dims dims;
    int64_t window;
  } cases[] = {
      {{2, 4, 2, 70, 70, 16}, 5}, {{1, 6, 3, 300, 300, 16}, 100}, {{1, 3, 1, 130, 130, 8}, 64},
      {{1, 2, 2, 40, 40, 8}, 1},  {{2, 4, 4, 129, 129, 16}, 129}, {{1, 4, 1, 520, 520, 8}, 257},
  };
  for (const auto& c : cases) {
    const Dims& s = c.dims;
    const Inputs in = random_inputs(s, 29 + s.tq + c.window);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
    const Reference ref = reference_attention(s, in.q.to_float_vector(), in.k.to_float_vector(),
                                              in.v.to_float_vector(), in.grad_out.to_float_vector(),
                                              true, scale, {}, c.window);
    const auto got = run_attention(in, true, {}, 0.0, nullptr, c.window);
    const std::string name =
        str_cat("B", s.b, " Hq", s.hq, " Hkv", s.hkv, " T", s.tq, " D", s.d, " window ", c.window);
    // With one key per query dQ and dK are 0 exactly, dS = P (dP - delta) with delta = dP: the
    // kernels' float rounding of the two leaves noise of a few 1e-7.
    const double floor = c.window == 1 ? 1e-6 : 1e-7;
    expect_close(got[0], ref.out, 2e-5, name + " out");
    expect_close(got[1], ref.grad_q, 2e-5, name + " grad_q", floor);
    expect_close(got[2], ref.grad_k, 2e-5, name + " grad_k", floor);
    expect_close(got[3], ref.grad_v, 2e-5, name + " grad_v");
  }
}

TEST(Attention, SlidingWindowWithDropoutKeepsThePhiloxIndices) {
  const Dims s{1, 2, 1, 90, 90, 8};
  const Inputs in = random_inputs(s, 31);
  const double p = 0.25;
  Generator gen(77);
  const auto got = run_attention(in, true, {}, p, &gen, 20);
  const uint64_t n = s.b * s.hq * s.tq * s.tk;
  std::vector<float> keep(n);
  for (uint64_t idx = 0; idx < n; ++idx) {
    const float u = philox_uniform01(philox_block(77, idx / 4).word[idx % 4]);
    keep[idx] = u >= static_cast<float>(p) ? 1.0f / (1.0f - static_cast<float>(p)) : 0.0f;
  }
  const Reference ref =
      reference_attention(s, in.q.to_float_vector(), in.k.to_float_vector(), in.v.to_float_vector(),
                          in.grad_out.to_float_vector(), true, 1.0 / std::sqrt(8.0), keep, 20);
  expect_close(got[0], ref.out, 2e-5, "out");
  expect_close(got[1], ref.grad_q, 2e-5, "grad_q");
  expect_close(got[2], ref.grad_k, 2e-5, "grad_k");
  expect_close(got[3], ref.grad_v, 2e-5, "grad_v");
}

TEST(Attention, SlidingWindowIsRefusedWithoutCausalOrBelowOne) {
  const Dims s{1, 1, 1, 4, 4, 8};
  const Inputs in = random_inputs(s, 1);
  EXPECT_THROW(scaled_dot_product_attention(in.q, in.k, in.v, false, {}, 0.0, nullptr, 2),
               ValueError);
  EXPECT_THROW(scaled_dot_product_attention(in.q, in.k, in.v, true, {}, 0.0, nullptr, 0),
               ValueError);
}

TEST(Attention, ExplicitScale) {
  const Dims s{1, 2, 1, 20, 20, 8};
  const Inputs in = random_inputs(s, 3);
  const Reference ref =
      reference_attention(s, in.q.to_float_vector(), in.k.to_float_vector(), in.v.to_float_vector(),
                          in.grad_out.to_float_vector(), false, 0.7);
  const auto got = run_attention(in, false, 0.7);
  expect_close(got[0], ref.out, 2e-5, "out");
  expect_close(got[1], ref.grad_q, 2e-5, "grad_q");
}

TEST(Attention, KernelLogSumExpMatchesReference) {
  const Dims s{2, 4, 2, 100, 100, 16};
  const Inputs in = random_inputs(s, 5);
  for (bool causal : {true, false}) {
    const Reference ref =
        reference_attention(s, in.q.to_float_vector(), in.k.to_float_vector(),
                            in.v.to_float_vector(), in.grad_out.to_float_vector(), causal, 0.25);
    const Tensor out_t = Tensor::empty(in.q.shape(), DType::f32, kCPU);
    const Tensor lse_t = Tensor::empty({s.b, s.hq, s.tq}, DType::f32, kCPU);
    cpu::attention_forward(in.q, in.k, in.v, causal, 0, 0.25f, 0.0f, {}, out_t, lse_t);
    const std::vector<float> out = out_t.to_float_vector(), lse = lse_t.to_float_vector();
    expect_close(lse, ref.lse, 1e-6, causal ? "causal lse" : "lse");
    expect_close(out, ref.out, 2e-5, "out");
  }
}

TEST(Attention, DropoutMatchesReferenceWithThePhiloxMask) {
  const Dims s{2, 4, 2, 70, 70, 16};
  const Inputs in = random_inputs(s, 8);
  const double p = 0.3;
  Generator gen(1234);
  gen.set_offset(17);
  const auto got = run_attention(in, true, {}, p, &gen);
  const uint64_t n = s.b * s.hq * s.tq * s.tk;
  EXPECT_EQ(gen.offset(), 17 + philox_blocks_for(n)) << "one reservation of B*Hq*Tq*Tk numbers";
  // Element (b, h, i, j) is kept when uniform number ((b*Hq + h)*Tq + i)*Tk + j is >= p.
  std::vector<float> keep(n);
  int64_t kept = 0;
  for (uint64_t idx = 0; idx < n; ++idx) {
    const float u = philox_uniform01(philox_block(1234, 17 + idx / 4).word[idx % 4]);
    keep[idx] = u >= static_cast<float>(p) ? 1.0f / (1.0f - static_cast<float>(p)) : 0.0f;
    kept += keep[idx] != 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01);
  const Reference ref =
      reference_attention(s, in.q.to_float_vector(), in.k.to_float_vector(), in.v.to_float_vector(),
                          in.grad_out.to_float_vector(), true, 0.25, keep);
  expect_close(got[0], ref.out, 2e-5, "out");
  expect_close(got[1], ref.grad_q, 2e-5, "grad_q");
  expect_close(got[2], ref.grad_k, 2e-5, "grad_k");
  expect_close(got[3], ref.grad_v, 2e-5, "grad_v");

  // The same generator state repeats the mask; the next draw is another one.
  Generator again(1234);
  again.set_offset(17);
  EXPECT_EQ(run_attention(in, true, {}, p, &again), got);
  EXPECT_NE(run_attention(in, true, {}, p, &again)[0], got[0]);
}

TEST(Attention, BothBackwardSchedulesMatchTheReferenceAndRepeat) {
  // One kv head: a single thread owns it (one pass), two threads split its key tiles and add a
  // dQ pass; see Note [Attention backward schedules].
  const Dims s{1, 3, 1, 300, 300, 32};
  const Inputs in = random_inputs(s, 21);
  const Reference ref =
      reference_attention(s, in.q.to_float_vector(), in.k.to_float_vector(), in.v.to_float_vector(),
                          in.grad_out.to_float_vector(), true, 1.0 / std::sqrt(32.0));
  const int threads = omp_get_max_threads();
  for (int n : {1, 2}) {
    omp_set_num_threads(n);
    const auto got = run_attention(in, true);
    EXPECT_EQ(run_attention(in, true), got) << n << " threads";
    expect_close(got[1], ref.grad_q, 2e-5, std::to_string(n) + " threads, grad_q");
    expect_close(got[2], ref.grad_k, 2e-5, std::to_string(n) + " threads, grad_k");
    expect_close(got[3], ref.grad_v, 2e-5, std::to_string(n) + " threads, grad_v");
  }
  omp_set_num_threads(threads);
}

TEST(Attention, SavesInputsOutputAndLseOnlyAndNeverATxTBuffer) {
  const Dims s{1, 2, 1, 512, 512, 16};
  const int64_t io_bytes = s.b * s.hq * s.tq * s.d * 4, kv_bytes = s.b * s.hkv * s.tk * s.d * 4;
  const int64_t lse_bytes = s.b * s.hq * s.tq * 4;
  const int64_t txt_bytes = s.b * s.hq * s.tq * s.tk * 4;  // 2 MiB, against 64 KiB of q
  for (bool transposed : {false, true}) {
    Generator gen(3);
    Tensor q, k, v;
    if (transposed) {  // [B, T, H, D] viewed as [B, H, T, D]: read in place, no copy
      q = Tensor::randn({s.b, s.tq, s.hq, s.d}, DType::f32, kCPU, &gen).set_requires_grad(true);
      k = Tensor::randn({s.b, s.tk, s.hkv, s.d}, DType::f32, kCPU, &gen).set_requires_grad(true);
      v = Tensor::randn({s.b, s.tk, s.hkv, s.d}, DType::f32, kCPU, &gen).set_requires_grad(true);
    } else {
      q = Tensor::randn({s.b, s.hq, s.tq, s.d}, DType::f32, kCPU, &gen).set_requires_grad(true);
      k = Tensor::randn({s.b, s.hkv, s.tk, s.d}, DType::f32, kCPU, &gen).set_requires_grad(true);
      v = Tensor::randn({s.b, s.hkv, s.tk, s.d}, DType::f32, kCPU, &gen).set_requires_grad(true);
    }
    const Tensor grad = Tensor::ones({s.b, s.hq, s.tq, s.d});
    const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
    reset_peak_memory_stats(kCPU);
    Tensor out = transposed ? scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2),
                                                           transpose(v, 1, 2))
                            : scaled_dot_product_attention(q, k, v);
    const int64_t kept = static_cast<int64_t>(memory_allocated(kCPU)) - before;
    const int64_t forward_peak = static_cast<int64_t>(max_memory_allocated(kCPU)) - before;
    // Saved: q, k, v (the inputs themselves), the output and lse.
    EXPECT_EQ(kept, io_bytes + lse_bytes);
    EXPECT_EQ(forward_peak, io_bytes + lse_bytes);
    reset_peak_memory_stats(kCPU);
    backward(out, grad);
    const int64_t backward_peak = static_cast<int64_t>(max_memory_allocated(kCPU)) - before;
    // Out and lse, then the delta workspace and the three gradients, laid out as the inputs are
    // (so the transposes' backward are views: no copies).
    const int64_t backward_bytes = io_bytes + lse_bytes + lse_bytes + io_bytes + 2 * kv_bytes;
    EXPECT_EQ(backward_peak, backward_bytes);
    if (transposed) {
      EXPECT_EQ(out.stride(1), s.d) << "out is laid out as q: [B, T, H, D]";
      EXPECT_EQ(q.grad().strides(), q.strides());
    }
    EXPECT_LT(backward_peak, txt_bytes / 4);
    ASSERT_TRUE(q.grad().defined());
  }
}

// GPT-2's attention: one [B, T, 3C] projection split into q, k and v, viewed as heads, and the
// output viewed back as [B, T, C]. Neither direction copies: the output is laid out as
// [B, T, H, D], and the three gradients are written side by side into one [B, T, 3C] buffer,
// which split's backward hands on. The values are those of the same attention on contiguous
// copies of q, k and v, bit for bit.
TEST(Attention, FusedProjectionRunsWithoutCopies) {
  const int64_t b = 2, t = 48, h = 3, d = 16, c = h * d;
  for (DType dtype : {DType::f32, DType::bf16}) {
    Generator gen(11);
    const Tensor x = Tensor::randn({b, t, 3 * c}, DType::f32, kCPU, &gen).to(dtype);
    x.set_requires_grad(true);
    const Tensor grad = Tensor::randn({b, t, c}, DType::f32, kCPU, &gen).to(dtype);
    KernelCensus census;
    Tensor y;
    {
      KernelCensusScope scope(census);
      const std::vector<Tensor> parts = split(x, {c, c, c}, -1);
      auto heads = [&](const Tensor& part) { return transpose(reshape(part, {b, t, h, d}), 1, 2); };
      y = reshape(
          transpose(scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2])),
                    1, 2),
          {b, t, c});
      backward(y, grad);
    }
    for (const KernelLaunch& launch : census.launches()) {
      EXPECT_NE(std::string(launch.family), "copy") << dtype_name(dtype);
      EXPECT_NE(std::string(launch.family), "cast") << dtype_name(dtype);
    }
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(x.grad().is_contiguous());

    // The reference: contiguous [B, H, T, D] copies of each part.
    std::vector<Tensor> leaves;
    for (int64_t i = 0; i < 3; ++i) {
      leaves.push_back(
          transpose(reshape(x.detach().narrow(2, i * c, c), {b, t, h, d}), 1, 2).contiguous());
      leaves.back().set_requires_grad(true);
    }
    const Tensor ref = scaled_dot_product_attention(leaves[0], leaves[1], leaves[2]);
    backward(ref, transpose(reshape(grad, {b, t, h, d}), 1, 2).contiguous());
    EXPECT_EQ(reshape(transpose(ref, 1, 2), {b, t, c}).to_float_vector(), y.to_float_vector());
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(reshape(transpose(leaves[i].grad(), 1, 2), {b, t, c}).to_float_vector(),
                x.grad().narrow(2, i * c, c).to_float_vector())
          << dtype_name(dtype) << " part " << i;
    }
  }
}

// What the kernels of the CPU's attention table compute for one problem: out, lse, and the
// three gradients from out_for_backward (the forward's own out when undefined).
struct KernelRun {
  Tensor out, lse, grad_q, grad_k, grad_v;
};

KernelRun run_kernels(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_out,
                      bool causal, DropoutParams dropout, const Tensor& out_for_backward = {},
                      const Tensor& lse_for_backward = {}) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(q.size(3)));
  KernelRun r;
  r.out = Tensor::empty(q.shape(), q.dtype(), kCPU);
  r.lse = Tensor::empty({q.size(0), q.size(1), q.size(2)}, DType::f32, kCPU);
  cpu::attention_forward(q, k, v, causal, 0, scale, 0.0f, dropout, r.out, r.lse);
  const Tensor delta = Tensor::empty(r.lse.shape(), DType::f32, kCPU);
  const Tensor accum =
      q.dtype() == DType::f32 ? Tensor() : Tensor::empty(q.shape(), DType::f32, kCPU);
  r.grad_q = Tensor::empty(q.shape(), q.dtype(), kCPU);
  r.grad_k = Tensor::empty(k.shape(), q.dtype(), kCPU);
  r.grad_v = Tensor::empty(k.shape(), q.dtype(), kCPU);
  cpu::attention_backward(q, k, v, out_for_backward.defined() ? out_for_backward : r.out, grad_out,
                          lse_for_backward.defined() ? lse_for_backward : r.lse, causal, 0, scale,
                          0.0f, dropout, delta, r.grad_q, r.grad_k, r.grad_v, accum);
  return r;
}

// The kernels on bf16 / f16 inputs against the fp32 kernels on the same (rounded) values, their
// results rounded once. Backward reads the forward's output in the dtype it was stored in (for
// delta = rowsum(out * grad_out), as the CUDA kernel and FlashAttention do), so the fp32
// reference's backward is handed that rounded output, and the low-precision forward's lse. Up to
// head size 64 the low-precision kernels widen tiles of the f32 kernels' shapes, so every sum
// runs in the same order and the results agree bit for bit. At head size 128 their tiles have
// fewer keys (forward) and rows (backward) (Note [Widened attention tiles]): the fp32 sums differ
// in their last bits, which moves a rounded value by at most one unit in the last place of the
// dtype (2^-7 relative for bf16, 2^-10 for f16) where it lies at a rounding boundary; values
// near 0 after cancellation get 1e-6 of the tensor's largest value besides.
TEST(Attention, LowPrecisionIsFp32RoundedOnce) {
  const struct {
    Dims dims;
    bool causal;
    float dropout_p;
    bool exact;
  } cases[] = {
      {{1, 2, 2, 40, 40, 16}, false, 0.0f, true},    {{2, 4, 2, 70, 300, 32}, false, 0.0f, true},
      {{1, 4, 2, 300, 300, 64}, true, 0.2f, true},   {{1, 3, 1, 300, 300, 64}, true, 0.0f, true},
      {{1, 4, 1, 150, 150, 128}, true, 0.1f, false}, {{1, 2, 2, 70, 300, 128}, false, 0.0f, false},
  };
  for (const auto& c : cases) {
    const Dims& s = c.dims;
    const Inputs in = random_inputs(s, 4 + s.d);
    const DropoutParams dropout{c.dropout_p, 99, 5};
    for (const DType dtype : {DType::bf16, DType::f16}) {
      const std::string name = std::string(dtype_name(dtype)) + " Hq" + std::to_string(s.hq) +
                               " Hkv" + std::to_string(s.hkv) + " Tq" + std::to_string(s.tq) +
                               " D" + std::to_string(s.d);
      const Tensor q = in.q.detach().to(dtype), k = in.k.detach().to(dtype),
                   v = in.v.detach().to(dtype), g = in.grad_out.to(dtype);
      const KernelRun low = run_kernels(q, k, v, g, c.causal, dropout);
      const KernelRun ref =
          run_kernels(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), g.to(DType::f32),
                      c.causal, dropout, low.out.to(DType::f32), low.lse);
      if (c.exact) {
        EXPECT_EQ(low.lse.to_float_vector(), ref.lse.to_float_vector()) << name;
      }
      const double ulp = dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
      const std::pair<const char*, std::pair<Tensor, Tensor>> results[] = {
          {"out", {low.out, ref.out}},
          {"grad_q", {low.grad_q, ref.grad_q}},
          {"grad_k", {low.grad_k, ref.grad_k}},
          {"grad_v", {low.grad_v, ref.grad_v}}};
      for (const auto& [what, pair] : results) {
        EXPECT_EQ(pair.first.dtype(), dtype) << name << " " << what;
        const std::vector<float> got = pair.first.to_float_vector();
        const std::vector<float> wide = pair.second.to_float_vector();
        const std::vector<float> once = pair.second.to(dtype).to_float_vector();
        if (c.exact) {
          EXPECT_EQ(got, once) << name << " " << what;
          continue;
        }
        double largest = 0.0;
        for (float x : wide) largest = std::max(largest, static_cast<double>(std::abs(x)));
        for (size_t i = 0; i < once.size(); ++i) {
          ASSERT_NEAR(got[i], once[i], ulp * std::abs(wide[i]) + 1e-6 * largest)
              << name << " " << what << ", element " << i;
        }
      }
    }
  }
}

TEST(Attention, BackwardByHeadGroupsEqualsOneCallBitForBit) {
  // Note [Attention backward by head groups]: a budget of one key / value head's accumulator
  // splits 4 kv heads into 4 calls (3 into 3, a batch of 2 copying its lse rows), and 2.5 heads'
  // into calls of 2 (for 3 heads, 2 and 1); the gradients are one call's bit for bit.
  const Dims shapes[] = {{1, 8, 4, 96, 96, 32}, {2, 6, 3, 80, 80, 16}};
  for (const Dims& s : shapes) {
    const Inputs in = random_inputs(s, 21);
    const int64_t one_head = s.b * (s.hq / s.hkv) * s.tq * s.d * 4;
    for (const int64_t budget : {one_head, one_head * 5 / 2}) {
      std::vector<std::vector<float>> grads[2];
      for (int split = 0; split < 2; ++split) {
        const Tensor q = in.q.detach().to(DType::bf16), k = in.k.detach().to(DType::bf16),
                     v = in.v.detach().to(DType::bf16);
        for (const Tensor* t : {&q, &k, &v}) const_cast<Tensor*>(t)->set_requires_grad(true);
        AttentionAccumulatorBudget limit(split ? budget : int64_t{1} << 40);
        EXPECT_EQ(attention_backward_kv_heads(q, s.hkv, false),
                  split ? (budget == one_head ? 1 : 2) : s.hkv);
        backward(scaled_dot_product_attention(q, k, v, true), in.grad_out.to(DType::bf16));
        for (const Tensor* t : {&q, &k, &v}) grads[split].push_back(t->grad().to_float_vector());
      }
      EXPECT_EQ(grads[0], grads[1]) << "B " << s.b << ", Hkv " << s.hkv << ", budget " << budget;
    }
  }
  // Dropout draws its masks by head index: one call.
  const Tensor q = Tensor::zeros({1, 8, 4, 8}, DType::bf16);
  AttentionAccumulatorBudget limit(1);
  EXPECT_EQ(attention_backward_kv_heads(q, 4, true), 4);
  EXPECT_EQ(attention_backward_kv_heads(q.to(DType::f32), 4, false), 4);
}

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no ValueError";
}

TEST(Attention, ErrorMessagesNameTheArgumentAndLimit) {
  const Tensor q = Tensor::zeros({1, 4, 6, 8}), k = Tensor::zeros({1, 2, 6, 8});
  const Tensor k3 = Tensor::zeros({1, 3, 6, 8}), k_long = Tensor::zeros({1, 2, 9, 8});
  EXPECT_EQ(error_of([&] { scaled_dot_product_attention(q, k_long, k_long, true); }),
            "scaled_dot_product_attention: is_causal needs as many queries as keys, got q length "
            "6 and k length 9");
  EXPECT_NO_THROW(scaled_dot_product_attention(q, k_long, k_long, false));
  EXPECT_EQ(
      error_of([&] { scaled_dot_product_attention(q, k3, k3); }),
      "scaled_dot_product_attention: q has 4 heads, not a multiple of the 3 heads of k and v");
  EXPECT_EQ(error_of([&] { scaled_dot_product_attention(q, k, k, true, {}, 1.0); }),
            "scaled_dot_product_attention: dropout_p 1 must lie in [0, 1)");
  EXPECT_EQ(error_of([&] {
              scaled_dot_product_attention(Tensor::zeros({4, 6, 8}), k, k);
            }),
            "scaled_dot_product_attention: q [4, 6, 8], k [1, 2, 6, 8] and v [1, 2, 6, 8] must be "
            "4-D [B, H, T, D]");
  EXPECT_EQ(error_of([&] {
              scaled_dot_product_attention(q, k, Tensor::zeros({1, 2, 6, 4}));
            }),
            "scaled_dot_product_attention: k [1, 2, 6, 8] and v [1, 2, 6, 4] must have one shape");
  EXPECT_EQ(
      error_of([&] {
        scaled_dot_product_attention(q, Tensor::zeros({1, 2, 6, 4}), Tensor::zeros({1, 2, 6, 4}));
      }),
      "scaled_dot_product_attention: q [1, 4, 6, 8] and k [1, 2, 6, 4] must agree in batch "
      "(dim 0) and head size (dim 3)");
  EXPECT_EQ(error_of([&] { scaled_dot_product_attention(q, k.to(DType::bf16), k); }),
            "scaled_dot_product_attention: q, k and v must share a dtype, got f32, bf16 and f32");
  EXPECT_EQ(error_of([&] {
              rotary_embedding(Tensor::zeros({1, 2, 3, 5}));
            }),
            "rotary_embedding: head size 5 of x [1, 2, 3, 5] must be even");
  EXPECT_EQ(error_of([&] {
              rotary_embedding(Tensor::zeros({2, 3, 4}));
            }),
            "rotary_embedding: x [2, 3, 4] must be 4-D [B, H, T, D]");
  EXPECT_EQ(error_of([&] { rotary_embedding(q, 10000.0, -1); }),
            "rotary_embedding: position_offset -1 must be >= 0");
}

TEST(Rotary, MatchesDoubleReferenceAndBackwardRotatesBack) {
  const int64_t b = 2, h = 3, t = 9, d = 12;
  Generator gen(6);
  const Tensor x = Tensor::randn({b, h, t, d}, DType::f32, kCPU, &gen).set_requires_grad(true);
  const Tensor g = Tensor::randn({b, h, t, d}, DType::f32, kCPU, &gen);
  const Tensor out = rotary_embedding(x, 10000.0, 4);
  backward(out, g);
  const std::vector<float> xv = x.to_float_vector(), gv = g.to_float_vector();
  std::vector<double> expected(xv.size()), expected_grad(xv.size());
  for (int64_t row = 0; row < b * h * t; ++row) {
    const int64_t pos = 4 + row % t;
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = pos * std::pow(10000.0, -2.0 * i / d);
      const double c = std::cos(angle), s = std::sin(angle);
      const int64_t i1 = row * d + i, i2 = i1 + d / 2;
      expected[i1] = xv[i1] * c - xv[i2] * s;
      expected[i2] = xv[i2] * c + xv[i1] * s;
      expected_grad[i1] = gv[i1] * c + gv[i2] * s;
      expected_grad[i2] = gv[i2] * c - gv[i1] * s;
    }
  }
  expect_close(out.to_float_vector(), expected, 1e-6, "out");
  expect_close(x.grad().to_float_vector(), expected_grad, 1e-6, "grad");
}

TEST(Rotary, SavesNothing) {
  Generator gen(2);
  const Tensor x = Tensor::randn({2, 4, 32, 16}, DType::f32, kCPU, &gen).set_requires_grad(true);
  const int64_t before = static_cast<int64_t>(memory_allocated(kCPU));
  reset_peak_memory_stats(kCPU);
  const Tensor out = rotary_embedding(x);
  EXPECT_EQ(static_cast<int64_t>(memory_allocated(kCPU)) - before, x.nbytes());
  // The cos / sin table is the kernel's own scratch, as in a GPU's shared memory: no tensor.
  EXPECT_EQ(static_cast<int64_t>(max_memory_allocated(kCPU)) - before, x.nbytes());
}

// Fixture tensors by name (see tools/gen_attention_golden.py for the format).
std::map<std::string, Tensor> read_golden() {
  std::ifstream file(std::string(HEADROOM_FIXTURES_DIR) + "/ops/attention_golden.txt");
  EXPECT_TRUE(file) << "missing tests/fixtures/ops/attention_golden.txt";
  std::map<std::string, Tensor> tensors;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string name, colon;
    int ndim = 0;
    in >> name >> ndim;
    std::vector<int64_t> dims(ndim);
    for (int64_t& dim : dims) in >> dim;
    in >> colon;
    std::vector<float> values;
    float value;
    while (in >> value) values.push_back(value);
    tensors[name] = Tensor::from_floats(values, Shape(dims));
  }
  return tensors;
}

void expect_golden(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.to_float_vector(), e = expected.to_float_vector();
  float largest = 0.0f;
  for (float v : e) largest = std::max(largest, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    // 1e-5 relative; fp32 rounding in sums scales with the tensor's largest values, so elements
    // far below them are judged against a tenth of the largest.
    EXPECT_NEAR(a[i], e[i], 1e-5 * std::max(std::abs(e[i]), 0.1f * largest))
        << what << ", element " << i;
  }
}

TEST(AttentionGolden, MatchesTorchCausalGqaAttention) {
  std::map<std::string, Tensor> golden = read_golden();
  ASSERT_TRUE(golden.count("attention.q"));
  const Tensor q = golden["attention.q"].set_requires_grad(true);
  const Tensor k = golden["attention.k"].set_requires_grad(true);
  const Tensor v = golden["attention.v"].set_requires_grad(true);
  const Tensor out = scaled_dot_product_attention(q, k, v, true);
  backward(out, golden["attention.grad_out"]);
  expect_golden(out, golden["attention.out"], "out");
  expect_golden(q.grad(), golden["attention.grad_q"], "grad_q");
  expect_golden(k.grad(), golden["attention.grad_k"], "grad_k");
  expect_golden(v.grad(), golden["attention.grad_v"], "grad_v");
}

TEST(AttentionGolden, MatchesHfLlamaRotary) {
  std::map<std::string, Tensor> golden = read_golden();
  ASSERT_TRUE(golden.count("rotary.x"));
  const Tensor x = golden["rotary.x"].set_requires_grad(true);
  const Tensor out = rotary_embedding(x, 10000.0, 3);
  backward(out, golden["rotary.grad_out"]);
  expect_golden(out, golden["rotary.out"], "out");
  expect_golden(x.grad(), golden["rotary.grad_x"], "grad_x");
}

}  // namespace
}  // namespace headroom
