// Attention forward + backward: the flash kernels (backend/cpu/attention.h) against a naive
// materialised softmax(QK^T)V on cpu::gemm, side by side in one run, plus the autograd op.
// Usage: attention_bench [B H T D [reps [dtype]]]   (default 8 6 256 64 10 f32, causal; dtype:
// f32, bf16 or f16, of the op + autograd row only)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/gemm.h"
#include "core/generator.h"
#include "ops/attention.h"

namespace {

using headroom::cpu::gemm;

struct Shape4 {
  int64_t b, h, t, d;
};

// softmax(scale * q k^T, causal) v with the [B, H, T, T] probabilities kept for backward.
void naive_forward(const Shape4& s, const float* q, const float* k, const float* v, float scale,
                   float* probs, float* out) {
  const int64_t td = s.t * s.d, tt = s.t * s.t;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.b * s.h; ++bh) {
    float* p = probs + bh * tt;
    gemm(false, true, s.t, s.t, s.d, scale, q + bh * td, s.d, k + bh * td, s.d, 0.0f, p, s.t);
    for (int64_t i = 0; i < s.t; ++i) {
      float* row = p + i * s.t;
      float mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j <= i; ++j) {
        row[j] = std::exp(row[j] - mx);
        sum += row[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
      for (int64_t j = i + 1; j < s.t; ++j) row[j] = 0.0f;
    }
    gemm(false, false, s.t, s.d, s.t, 1.0f, p, s.t, v + bh * td, s.d, 0.0f, out + bh * td, s.d);
  }
}

void naive_backward(const Shape4& s, const float* q, const float* k, const float* v, float scale,
                    const float* probs, const float* grad_out, float* dprobs, float* gq, float* gk,
                    float* gv) {
  const int64_t td = s.t * s.d, tt = s.t * s.t;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.b * s.h; ++bh) {
    const float* p = probs + bh * tt;
    float* dp = dprobs + bh * tt;
    const float* g = grad_out + bh * td;
    gemm(true, false, s.t, s.d, s.t, 1.0f, p, s.t, g, s.d, 0.0f, gv + bh * td, s.d);
    gemm(false, true, s.t, s.t, s.d, 1.0f, g, s.d, v + bh * td, s.d, 0.0f, dp, s.t);
    for (int64_t i = 0; i < s.t; ++i) {
      const float* prow = p + i * s.t;
      float* drow = dp + i * s.t;
      float dot = 0.0f;
      for (int64_t j = 0; j < s.t; ++j) dot += prow[j] * drow[j];
      for (int64_t j = 0; j < s.t; ++j) drow[j] = prow[j] * (drow[j] - dot);
    }
    gemm(false, false, s.t, s.d, s.t, scale, dp, s.t, k + bh * td, s.d, 0.0f, gq + bh * td, s.d);
    gemm(true, false, s.t, s.d, s.t, scale, dp, s.t, q + bh * td, s.d, 0.0f, gk + bh * td, s.d);
  }
}

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// Best of `reps` wall-clock timings of fn, in milliseconds; `cpu` gets the least CPU time of
// the process over one rep (all threads), which a busy machine disturbs less.
double best_ms(int reps, const std::function<void()>& fn, double* cpu = nullptr) {
  fn();
  double best = 1e30, best_cpu = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best_cpu = std::min(best_cpu, cpu_ms() - c0);
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  if (cpu) *cpu = best_cpu;
  return best;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace headroom;
  Shape4 s{8, 6, 256, 64};
  int reps = 10;
  if (argc >= 5)
    s = {std::atoll(argv[1]), std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4])};
  if (argc >= 6) reps = std::atoi(argv[5]);
  const DType op_dtype = argc >= 7 ? dtype_from_name(argv[6]) : DType::f32;
  const int64_t n = s.b * s.h * s.t * s.d, nt = s.b * s.h * s.t * s.t;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  Generator gen(1);
  const Tensor tq = Tensor::randn({s.b, s.h, s.t, s.d}, DType::f32, kCPU, &gen);
  const Tensor tk = Tensor::randn({s.b, s.h, s.t, s.d}, DType::f32, kCPU, &gen);
  const Tensor tv = Tensor::randn({s.b, s.h, s.t, s.d}, DType::f32, kCPU, &gen);
  const Tensor tg = Tensor::randn({s.b, s.h, s.t, s.d}, DType::f32, kCPU, &gen);
  const float *q = tq.data<float>(), *k = tk.data<float>(), *v = tv.data<float>(),
              *g = tg.data<float>();

  // The kernels of the CPU's attention table, on the op's buffers.
  const Tensor tout = Tensor::empty({s.b, s.h, s.t, s.d}, DType::f32, kCPU);
  const Tensor tlse = Tensor::empty({s.b, s.h, s.t}, DType::f32, kCPU);
  const Tensor tdelta = Tensor::empty({s.b, s.h, s.t}, DType::f32, kCPU);
  const Tensor tgq = Tensor::empty({s.b, s.h, s.t, s.d}, DType::f32, kCPU);
  const Tensor tgk = Tensor::empty({s.b, s.h, s.t, s.d}, DType::f32, kCPU);
  const Tensor tgv = Tensor::empty({s.b, s.h, s.t, s.d}, DType::f32, kCPU);
  double cpu[4];
  const double flash_fwd = best_ms(
      reps, [&] { cpu::attention_forward(tq, tk, tv, true, 0, scale, 0.0f, {}, tout, tlse); },
      &cpu[0]);
  const double flash_bwd = best_ms(
      reps,
      [&] {
        cpu::attention_backward(tq, tk, tv, tout, tg, tlse, true, 0, scale, 0.0f, {}, tdelta, tgq,
                                tgk, tgv, Tensor());
      },
      &cpu[1]);
  const std::vector<float> out = tout.to_float_vector(), gq = tgq.to_float_vector(),
                           gk = tgk.to_float_vector(), gv = tgv.to_float_vector();

  std::vector<float> probs(nt), dprobs(nt), nout(n), ngq(n), ngk(n), ngv(n);
  const double naive_fwd = best_ms(
      reps, [&] { naive_forward(s, q, k, v, scale, probs.data(), nout.data()); }, &cpu[2]);
  const double naive_bwd = best_ms(
      reps,
      [&] {
        naive_backward(s, q, k, v, scale, probs.data(), g, dprobs.data(), ngq.data(), ngk.data(),
                       ngv.data());
      },
      &cpu[3]);

  const Tensor oq = tq.to(op_dtype).set_requires_grad(true);
  const Tensor ok = tk.to(op_dtype).set_requires_grad(true);
  const Tensor ov = tv.to(op_dtype).set_requires_grad(true);
  const Tensor og = tg.to(op_dtype);
  const double op_total = best_ms(reps, [&] {
    Tensor o = scaled_dot_product_attention(oq, ok, ov, true);
    backward(o, og);
  });

  std::printf("attention B %lld H %lld T %lld D %lld causal, %d threads, best of %d (ms)\n",
              static_cast<long long>(s.b), static_cast<long long>(s.h), static_cast<long long>(s.t),
              static_cast<long long>(s.d), omp_get_max_threads(), reps);
  std::printf("  %-28s %9s %9s %9s %12s %12s\n", "", "forward", "backward", "total", "cpu forward",
              "cpu backward");
  std::printf("  %-28s %9.2f %9.2f %9.2f %12.2f %12.2f\n", "flash (kernels)", flash_fwd, flash_bwd,
              flash_fwd + flash_bwd, cpu[0], cpu[1]);
  std::printf("  %-28s %9.2f %9.2f %9.2f %12.2f %12.2f\n", "naive materialised (gemm)", naive_fwd,
              naive_bwd, naive_fwd + naive_bwd, cpu[2], cpu[3]);
  const std::string op_row = std::string("op + autograd, ") + dtype_name(op_dtype);
  std::printf("  %-28s %9s %9s %9.2f\n", op_row.c_str(), "", "", op_total);
  std::printf("  naive keeps %.1f MiB of probabilities; flash keeps %.1f KiB of lse\n",
              nt * 4.0 / (1 << 20), s.b * s.h * s.t * 4.0 / 1024);
  std::printf("  max |flash - naive|: out %.2e, grad_q %.2e, grad_k %.2e, grad_v %.2e\n",
              max_diff(out, nout), max_diff(gq, ngq), max_diff(gk, ngk), max_diff(gv, ngv));
  return 0;
}
