// GEMM throughput on the shapes of the GPT-2 training benchmark. fp32: oneDNN's sgemm (what
// backend/cpu/gemm.h uses) against OpenBLAS (what Debian's PyTorch uses, loaded at run time when
// installed), the measurement behind the choice of library. bf16: cpu::gemm_bf16 with an fp32
// and a bf16 C, against torch's bf16 matmul (bench/gemm_bench_peer.py, when torch is installed).
//
//   ninja -C build gemm_bench && build/bench/gemm_bench [--no-peer]   (threads: OMP_NUM_THREADS)
#include <dlfcn.h>
#include <dnnl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace {

// cblas_sgemm's signature with row-major order (101) and no-trans / trans (111 / 112).
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);

struct Shape {
  const char* what;
  int m, n, k;
  bool ta, tb;
  int pad = 0;  // added to every leading dimension
};

// Best of 20: the development machine is shared, and the best time is the one least disturbed.
constexpr int kRuns = 20;

// Operands start on 64-byte boundaries, as the CachingAllocator's blocks do (512 B): with bf16
// matrices 16 bytes off (where a std::vector's large buffer starts), oneDNN's AMX kernels run at
// a third to a half of their speed.
template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer(size_t n, T value)
      : data_(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64))) {
    std::fill_n(data_.get(), n, value);
  }
  T* data() { return data_.get(); }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
};

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename F>
double best_of(int runs, F&& f) {
  double best = 1e30;
  f();  // warm-up (oneDNN JIT-compiles its kernel on first use)
  for (int r = 0; r < runs; ++r) {
    const double t = seconds();
    f();
    best = std::min(best, seconds() - t);
  }
  return best;
}

// torch's bf16 GFLOP/s per shape from gemm_bench_peer.py; empty when it cannot run.
std::vector<double> torch_bf16_gflops(const std::vector<Shape>& shapes) {
  const char* python = "/usr/bin/python3";
  const std::filesystem::path script =
      std::filesystem::path(HEADROOM_SOURCE_DIR) / "bench" / "gemm_bench_peer.py";
  if (access(python, X_OK) != 0 || !std::filesystem::exists(script)) return {};
  std::string command =
      headroom::str_cat(python, " ", script.string(), " --threads ", omp_get_max_threads());
  for (const Shape& s : shapes) {
    if (s.pad != 0) continue;  // the peer's operands are dense
    command += headroom::str_cat(" ", s.m, ",", s.n, ",", s.k, ",", s.ta, ",", s.tb);
  }
  command += " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {};
  std::vector<double> dense;
  char line[512];
  while (std::fgets(line, sizeof line, pipe)) {
    int index;
    double gflops;
    if (std::sscanf(line, "RESULT %d %lf", &index, &gflops) == 2) {
      dense.push_back(gflops);
    } else {
      std::fputs(line, stdout);
    }
  }
  if (pclose(pipe) != 0) return {};
  std::vector<double> gflops;
  size_t next = 0;
  for (const Shape& s : shapes) {
    gflops.push_back(s.pad == 0 && next < dense.size() ? dense[next++] : 0.0);
  }
  return gflops;
}

}  // namespace

int main(int argc, char** argv) {
  const bool peer = !(argc > 1 && std::strcmp(argv[1], "--no-peer") == 0);
  CblasSgemm openblas = nullptr;
  for (const char* name : {"libopenblas.so.0", "libopenblasp-r0.3.21.so", "libblas.so.3"}) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      openblas = reinterpret_cast<CblasSgemm>(dlsym(handle, "cblas_sgemm"));
      if (openblas) break;
    }
  }
  const std::vector<Shape> shapes = {
      {"qkv projection", 2048, 1152, 384, false, false},
      {"mlp down", 2048, 384, 1536, false, false},
      {"weight gradient", 384, 1536, 2048, true, false},
      {"lm head logits (128-token chunk)", 128, 50304, 384, false, true},
      {"lm head dx (chunk)", 128, 384, 50304, false, false},
      {"lm head dweight (chunk)", 50304, 384, 128, true, false},
      {"square 1024", 1024, 1024, 1024, false, false},
      // Leading dimensions that are not the row lengths: gemm_bf16 copies such operands into
      // dense ones (see Note [bf16 GEMM on oneDNN's matmul primitive]).
      {"qkv projection, ld + 8", 2048, 1152, 384, false, false, 8},
      {"weight gradient, ld + 8", 384, 1536, 2048, true, false, 8},
      {"lm head dweight (chunk), ld + 8", 50304, 384, 128, true, false, 8},
  };
  const std::vector<double> torch = peer ? torch_bf16_gflops(shapes) : std::vector<double>{};
  std::printf("%d threads; GFLOP/s\n", omp_get_max_threads());
  std::printf("%-34s %9s %9s %11s %11s %11s\n", "shape (M x N x K)", "f32", "f32", "bf16->f32",
              "bf16->bf16", "bf16");
  std::printf("%-34s %9s %9s %11s %11s %11s\n", "", "oneDNN", "OpenBLAS", "headroom", "headroom",
              "torch");
  using headroom::BFloat16;
  using headroom::DType;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    const int lda = (s.ta ? s.m : s.k) + s.pad, ldb = (s.tb ? s.k : s.n) + s.pad, ldc = s.n + s.pad;
    const size_t a_size = static_cast<size_t>(s.ta ? s.k : s.m) * lda,
                 b_size = static_cast<size_t>(s.tb ? s.n : s.k) * ldb,
                 c_size = static_cast<size_t>(s.m) * ldc;
    AlignedBuffer<float> a(a_size, 0.5f), b(b_size, 0.25f), c(c_size, 0.0f);
    AlignedBuffer<BFloat16> a16(a_size, BFloat16(0.5f)), b16(b_size, BFloat16(0.25f)),
        c16(c_size, BFloat16(0.0f));
    const double flops = 2.0 * s.m * s.n * s.k;
    const double dnnl = best_of(kRuns, [&] {
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(),
                 ldb, 0.0f, c.data(), ldc);
    });
    double blas = 0.0;
    if (openblas) {
      blas = best_of(kRuns, [&] {
        openblas(101, s.ta ? 112 : 111, s.tb ? 112 : 111, s.m, s.n, s.k, 1.0f, a.data(), lda,
                 b.data(), ldb, 0.0f, c.data(), ldc);
      });
    }
    const double bf16_f32 = best_of(kRuns, [&] {
      headroom::cpu::gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a16.data(), lda, b16.data(), ldb,
                               0.0f, c.data(), DType::f32, ldc);
    });
    const double bf16_bf16 = best_of(kRuns, [&] {
      headroom::cpu::gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a16.data(), lda, b16.data(), ldb,
                               0.0f, c16.data(), DType::bf16, ldc);
    });
    const double peer_gflops = i < torch.size() ? torch[i] : 0.0;
    std::printf("%-34s %9.1f %9.1f %11.1f %11.1f %11.1f\n", s.what, flops / dnnl / 1e9,
                openblas ? flops / blas / 1e9 : 0.0, flops / bf16_f32 / 1e9,
                flops / bf16_bf16 / 1e9, peer_gflops);
  }
  if (!openblas) std::printf("(OpenBLAS not found: apt-get install libopenblas0-pthread)\n");
  if (peer && torch.empty()) {
    std::printf("(torch peer did not run: try /usr/bin/python3 -c 'import torch')\n");
  }
}
