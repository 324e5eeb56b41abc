// Attention forward + backward: the flash kernels (backend/cpu/attention.h) against a naive
// materialised softmax(QK^T)V on cpu::gemm, side by side in one run, plus the autograd op.
// Usage: attention_bench [B H T D [reps [dtype]]]   (default 8 6 256 64 10 f32, causal; dtype:
// f32, bf16 or f16, of the op + autograd row only)
//
// On a GPU: attention_bench --cuda [--gpu NAME] [reps] times the CUDA attention kernel table on
// GPT-2's (16 x 12 heads x 1024, D 64) and Llama-3.2-1B's (4 x 32 / 8 heads x 2048, D 64)
// causal bf16 shapes, q / k / v read from one fused projection as the models do: cuDNN's fused
// SDPA (backend/cuda/cudnn_attention.h) and headroom's own kernels, forward and backward, each in
// TFLOP/s (the kernel census's FLOPs: 4 B Hq T S D forward, 2.5 times that backward, halved when
// causal) beside the roofline: the lesser of the GPU's bf16 peak and its HBM bandwidth times the
// census's FLOPs per byte, from `headroom plan --gpu NAME`'s table (default H100-80GB).
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
#include "backend/attention_kernels.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/gemm.h"
#include "core/device_kernels.h"
#include "core/generator.h"
#include "ops/attention.h"
#include "plan/gpu_specs.h"
#ifdef HEADROOM_WITH_CUDA
#include "backend/cuda/cudnn_attention.h"
#endif

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

#ifdef HEADROOM_WITH_CUDA
using headroom::DType;
using headroom::Tensor;

struct GpuShape {
  const char* name;
  int64_t b, hq, hkv, t, d;
};

// One problem's buffers on the GPU, laid out as a model's: q, k, v heads views of one fused
// [B, T, (Hq + 2 Hkv) D] projection, out [B, T, Hq, D] viewed as heads, the gradients views of one
// fused buffer, and the op's backward workspace (Note [Attention backward workspace]).
struct GpuProblem {
  Tensor q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, accum;
};

GpuProblem gpu_problem(const GpuShape& s, headroom::Device gpu) {
  const DType bf16 = DType::bf16;
  const int64_t width = (s.hq + 2 * s.hkv) * s.d;
  auto heads = [&](const Tensor& x, int64_t first, int64_t count) {
    return x.narrow(2, first * s.d, count * s.d).view({s.b, s.t, count, s.d}).transpose(1, 2);
  };
  headroom::Generator gen(3);
  GpuProblem p;
  const Tensor qkv = Tensor::randn({s.b, s.t, width}, DType::f32, headroom::kCPU, &gen).to(bf16);
  const Tensor x = qkv.to(gpu);
  p.q = heads(x, 0, s.hq);
  p.k = heads(x, s.hq, s.hkv);
  p.v = heads(x, s.hq + s.hkv, s.hkv);
  p.out = Tensor::empty({s.b, s.t, s.hq, s.d}, bf16, gpu).transpose(1, 2);
  p.lse = Tensor::empty({s.b, s.hq, s.t}, DType::f32, gpu);
  p.grad_out = Tensor::randn({s.b, s.t, s.hq, s.d}, DType::f32, headroom::kCPU, &gen)
                   .to(bf16)
                   .to(gpu)
                   .transpose(1, 2);
  const Tensor grads = Tensor::empty({s.b, s.t, width}, bf16, gpu);
  p.grad_q = heads(grads, 0, s.hq);
  p.grad_k = heads(grads, s.hq, s.hkv);
  p.grad_v = heads(grads, s.hq + s.hkv, s.hkv);
  const int64_t rows = s.b * s.hq * s.t;
  const Tensor workspace = Tensor::empty({rows * (s.d + 1)}, DType::f32, gpu);
  p.accum = workspace.narrow(0, 0, rows * s.d).view(p.q.shape());
  p.delta = workspace.narrow(0, rows * s.d, rows).view({s.b, s.hq, s.t});
  return p;
}

// Mean milliseconds of fn over `reps` runs after two unrecorded ones, the GPU drained around.
double gpu_ms(int reps, headroom::Device gpu, const std::function<void()>& fn) {
  const headroom::DeviceKernels& kernels = headroom::device_kernels(gpu);
  for (int r = 0; r < 2; ++r) fn();
  kernels.synchronize(gpu.index);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) fn();
  kernels.synchronize(gpu.index);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / reps;
}

int gpu_main(int argc, char** argv) {
  using namespace headroom;
  std::string gpu_name = "H100-80GB";
  int reps = 20;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--gpu" && i + 1 < argc) {
      gpu_name = argv[++i];
    } else {
      reps = std::max(1, std::atoi(argv[i]));
    }
  }
  if (!cuda_is_available()) {
    std::printf("attention_bench --cuda: no CUDA device: nothing to measure\n");
    return 0;
  }
  const GpuSpec& spec = find_gpu_spec(gpu_name);
  const Device gpu{DeviceType::cuda, 0};
  const GpuShape shapes[] = {{"GPT-2 124M", 16, 12, 12, 1024, 64},
                             {"Llama-3.2-1B", 4, 32, 8, 2048, 64}};
  const auto& forward = need_kernel("attention_bench", gpu, &AttentionKernels::forward);
  const auto& backward = need_kernel("attention_bench", gpu, &AttentionKernels::backward);
  std::printf(
      "attention on cuda:0 (roofline of %s: %.0f TFLOP/s bf16, %.2f TB/s), bf16, causal, "
      "mean of %d (cuDNN: %s)\n",
      spec.name.c_str(), spec.bf16_tflops, spec.memory_tb_per_s, reps,
      cuda::cudnn_library_info().description.c_str());
  std::printf("  %-14s %-9s %-8s %9s %9s %9s %9s\n", "shape", "pass", "kernel", "ms", "TFLOP/s",
              "roofline", "of roof");
  for (const GpuShape& s : shapes) {
    const GpuProblem p = gpu_problem(s, gpu);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    auto run_forward = [&] { forward(p.q, p.k, p.v, true, 0, scale, 0.0f, {}, p.out, p.lse, {}); };
    auto run_backward = [&] {
      backward(p.q, p.k, p.v, p.out, p.grad_out, p.lse, true, 0, scale, 0.0f, {}, p.delta, p.grad_q,
               p.grad_k, p.grad_v, p.accum, {});
    };
    const KernelWork fwd_work =
        attention_forward_cost(p.q, p.k, p.v, true, 0, scale, 0.0f, {}, p.out, p.lse, {});
    const KernelWork bwd_work =
        attention_backward_cost(p.q, p.k, p.v, p.out, p.grad_out, p.lse, true, 0, scale, 0.0f, {},
                                p.delta, p.grad_q, p.grad_k, p.grad_v, p.accum, {});
    for (bool use_cudnn : {true, false}) {
      cuda::set_cudnn_attention_enabled(use_cudnn);
      run_forward();  // the forward's out and lse, which backward reads
      const cuda::CudnnAttentionStats before = cuda::cudnn_attention_stats();
      const double fwd_ms = gpu_ms(reps, gpu, run_forward);
      const double bwd_ms = gpu_ms(reps, gpu, run_backward);
      const cuda::CudnnAttentionStats after = cuda::cudnn_attention_stats();
      const char* kernel = use_cudnn ? "cuDNN" : "headroom";
      if (use_cudnn && (after.forward == before.forward || after.backward == before.backward)) {
        std::printf("  %-14s cuDNN declined (%s): its rows are headroom's kernels\n", s.name,
                    after.last_declined.c_str());
        kernel = "declined";
      }
      const std::pair<const char*, std::pair<double, KernelWork>> passes[] = {
          {"forward", {fwd_ms, fwd_work}}, {"backward", {bwd_ms, bwd_work}}};
      for (const auto& [pass, timed] : passes) {
        const auto& [ms, work] = timed;
        const double tflops = work.flops / (ms * 1e-3) / 1e12;
        // FLOPs per byte times TB/s is TFLOP/s.
        const double roof = std::min(
            spec.bf16_tflops, work.flops / std::max<double>(static_cast<double>(work.bytes), 1.0) *
                                  spec.memory_tb_per_s);
        std::printf("  %-14s %-9s %-8s %9.3f %9.1f %9.0f %8.0f%%\n", s.name, pass, kernel, ms,
                    tflops, roof, 100.0 * tflops / roof);
      }
    }
    cuda::set_cudnn_attention_enabled(true);
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  using namespace headroom;
  if (argc >= 2 && std::string(argv[1]) == "--cuda") {
#ifdef HEADROOM_WITH_CUDA
    return gpu_main(argc, argv);
#else
    std::printf("attention_bench --cuda: this build has no CUDA backend\n");
    return 0;
#endif
  }
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
