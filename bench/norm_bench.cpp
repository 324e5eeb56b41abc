// The residual norms' kernels (Note [Residual norms] in ops/norm.h) against the separate ones
// they replace, on the CPU or a GPU: forward as add then the norm against add_*_norm_forward,
// backward as the norm's backward then the accumulation of the stream's gradient against the
// backward that adds it in place. Each row prints the median time, the bytes the kernel census
// counts for it, the achieved GB/s and, on a GPU, the roofline time on --gpu's card.
// Usage: norm_bench [rows dim [reps [dtype [device [gpu]]]]]
//   (default 16384 768 20 bf16 cpu H100-80GB: GPT-2's 16 x 1024 tokens; Llama-3.2-1B: 8192 2048)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/norm_kernels.h"
#include "bench_support.h"
#include "core/device_kernels.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/kernel_census.h"
#include "ops/elementwise.h"
#include "plan/gpu_specs.h"

namespace {

using namespace headroom;

struct Options {
  int64_t rows = 16384;
  int64_t dim = 768;
  int reps = 20;
  DType dtype = DType::bf16;
  Device device = kCPU;
  std::string gpu = "H100-80GB";
};

Options parse(int argc, char** argv) {
  Options o;
  if (argc > 1) o.rows = std::atoll(argv[1]);
  if (argc > 2) o.dim = std::atoll(argv[2]);
  if (argc > 3) o.reps = std::atoi(argv[3]);
  if (argc > 4) o.dtype = dtype_from_name(argv[4]);
  if (argc > 5) o.device = Device::parse(argv[5]);
  if (argc > 6) o.gpu = argv[6];
  if (o.rows <= 0 || o.dim <= 0 || o.reps <= 0) {
    std::fprintf(stderr, "usage: norm_bench [rows dim [reps [dtype [device [gpu]]]]]\n");
    std::exit(2);
  }
  return o;
}

void synchronize(Device device) {
  if (device.is_cuda()) find_device_kernels(DeviceType::cuda)->synchronize(device.index);
}

struct Figures {
  double seconds;
  int64_t bytes;
  size_t launches;
};

// Median seconds of `reps` runs after a warm-up, and the census's bytes and launches of one.
Figures measure(const Options& o, const std::function<void()>& run) {
  KernelCensus census;
  {
    KernelCensusScope scope(census);
    run();
  }
  int64_t bytes = 0;
  for (const KernelLaunch& l : census.launches()) bytes += l.work.bytes;
  synchronize(o.device);
  std::vector<double> seconds;
  for (int r = 0; r < o.reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    synchronize(o.device);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return {bench::median(seconds), bytes, census.launches().size()};
}

void print_row(const Options& o, const char* name, const Figures& f) {
  const double gb = static_cast<double>(f.bytes) / 1e9;
  std::printf("  %-34s %8zu %10.3f %10.3f %9.1f", name, f.launches, f.seconds * 1e3, gb,
              gb / f.seconds);
  if (o.device.is_cuda()) {
    const double roofline_ms = gb / (find_gpu_spec(o.gpu).memory_tb_per_s * 1e3) * 1e3;
    std::printf(" %12.3f", roofline_ms);
  }
  std::printf("\n");
}

Tensor randn(const Options& o, const Shape& shape, uint64_t seed, DType dtype) {
  Generator generator(seed);
  return Tensor::randn(shape, DType::f32, kCPU, &generator).to(dtype).to(o.device);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  NoGradGuard no_grad;
  const Shape rows_shape{o.rows, o.dim};
  const Device dev = o.device;
  const Tensor residual = randn(o, rows_shape, 1, o.dtype);
  const Tensor branch = randn(o, rows_shape, 2, o.dtype);
  const Tensor weight = randn(o, {o.dim}, 3, DType::f32);
  const Tensor bias = randn(o, {o.dim}, 4, DType::f32);
  const Tensor grad_out = randn(o, rows_shape, 5, o.dtype);
  const Tensor grad_stream = randn(o, rows_shape, 6, o.dtype);
  Tensor sum = Tensor::empty(rows_shape, o.dtype, dev);
  Tensor out = Tensor::empty(rows_shape, o.dtype, dev);
  Tensor dx = Tensor::empty(rows_shape, o.dtype, dev);
  Tensor accumulated = Tensor::empty(rows_shape, o.dtype, dev);
  Tensor mean = Tensor::empty({o.rows}, DType::f32, dev);
  Tensor rstd = Tensor::empty({o.rows}, DType::f32, dev);
  Tensor dweight = Tensor::empty({o.dim}, DType::f32, dev);
  Tensor dbias = Tensor::empty({o.dim}, DType::f32, dev);
  Tensor partial = Tensor::empty({norm_backward_blocks(o.rows), 2, o.dim}, DType::f32, dev);
  const char* op = "norm_bench";
  const Tensor none;

  std::printf("norm_bench: %lld rows x %lld, %s on %s, median of %d\n",
              static_cast<long long>(o.rows), static_cast<long long>(o.dim), dtype_name(o.dtype),
              dev.str().c_str(), o.reps);
  std::printf("  %-34s %8s %10s %10s %9s%s\n", "", "launches", "ms", "GB", "GB/s",
              dev.is_cuda() ? str_cat(" roofline ms (", o.gpu, ")").c_str() : "");
  for (const bool centred : {true, false}) {
    std::printf("%s\n", centred ? "LayerNorm" : "RMSNorm");
    const Tensor& b = centred ? bias : none;
    const Tensor& m = centred ? mean : none;
    const Figures separate_forward = measure(o, [&] {
      const Tensor s = add(residual, branch);
      if (centred) {
        need_kernel(op, dev, &NormKernels::layer_norm_forward)(s, weight, b, 1e-5f, out, m, rstd);
      } else {
        need_kernel(op, dev, &NormKernels::rms_norm_forward)(s, weight, 1e-5f, 0.0f, out, rstd);
      }
    });
    const Figures fused_forward = measure(o, [&] {
      if (centred) {
        need_kernel(op, dev, &NormKernels::add_layer_norm_forward)(residual, branch, weight, b,
                                                                   1e-5f, sum, out, m, rstd);
      } else {
        need_kernel(op, dev, &NormKernels::add_rms_norm_forward)(residual, branch, weight, 1e-5f,
                                                                 0.0f, sum, out, rstd);
      }
    });
    // Backward: the stream's gradient is copied fresh into `accumulated` in both rows (the
    // engine hands it over as a buffer of its own), then either summed with the norm's dx by
    // an accumulation, or handed to the norm's backward as grad_residual and dx.
    auto norm_backward = [&](const Tensor& residual_grad, const Tensor& into) {
      if (centred) {
        need_kernel(op, dev, &NormKernels::layer_norm_backward)(
            grad_out, sum, weight, m, rstd, residual_grad, into, dweight,
            b.defined() ? dbias : none, partial);
      } else {
        need_kernel(op, dev, &NormKernels::rms_norm_backward)(
            grad_out, sum, weight, 0.0f, rstd, residual_grad, into, dweight, partial);
      }
    };
    const Figures separate_backward = measure(o, [&] {
      accumulated.copy_(grad_stream);
      norm_backward(none, dx);
      accumulated.add_(dx);
    });
    const Figures fused_backward = measure(o, [&] {
      accumulated.copy_(grad_stream);
      norm_backward(accumulated, accumulated);
    });
    print_row(o, "forward: add, then the norm", separate_forward);
    print_row(o, "forward: one kernel", fused_forward);
    print_row(o, "backward: the norm's, + accumulate", separate_backward);
    print_row(o, "backward: the sum in the norm's", fused_backward);
    std::printf("  forward %.2fx, backward %.2fx (times of the separate kernels over the fused)\n",
                separate_forward.seconds / fused_forward.seconds,
                separate_backward.seconds / fused_backward.seconds);
  }
  return 0;
}
