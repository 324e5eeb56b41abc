// The measurement behind backend/cpu/gemm.h's choice of library: fp32 GEMM throughput of oneDNN
// (what headroom links) and OpenBLAS (what Debian's PyTorch uses, loaded at run time when
// installed) on the shapes of the GPT-2 training benchmark, side by side.
//
//   ninja -C build gemm_bench && build/bench/gemm_bench     (threads: OMP_NUM_THREADS)
#include <dlfcn.h>
#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

// cblas_sgemm's signature with row-major order (101) and no-trans / trans (111 / 112).
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);

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

}  // namespace

int main() {
  CblasSgemm openblas = nullptr;
  for (const char* name : {"libopenblas.so.0", "libopenblasp-r0.3.21.so", "libblas.so.3"}) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      openblas = reinterpret_cast<CblasSgemm>(dlsym(handle, "cblas_sgemm"));
      if (openblas) break;
    }
  }
  struct Shape {
    const char* what;
    int m, n, k;
    bool ta, tb;
  };
  const Shape shapes[] = {
      {"qkv projection", 2048, 1152, 384, false, false},
      {"mlp down", 2048, 384, 1536, false, false},
      {"weight gradient", 384, 1536, 2048, true, false},
      {"lm head logits (128-token chunk)", 128, 50304, 384, false, true},
      {"lm head dx (chunk)", 128, 384, 50304, false, false},
      {"lm head dweight (chunk)", 50304, 384, 128, true, false},
      {"square 1024", 1024, 1024, 1024, false, false},
  };
  std::printf("%-34s %12s %12s   GFLOP/s\n", "shape (M x N x K)", "oneDNN", "OpenBLAS");
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k, 0.5f), b(static_cast<size_t>(s.k) * s.n, 0.25f),
        c(static_cast<size_t>(s.m) * s.n);
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    const double flops = 2.0 * s.m * s.n * s.k;
    const double dnnl = best_of(5, [&] {
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(),
                 ldb, 0.0f, c.data(), s.n);
    });
    double blas = 0.0;
    if (openblas) {
      blas = best_of(5, [&] {
        openblas(101, s.ta ? 112 : 111, s.tb ? 112 : 111, s.m, s.n, s.k, 1.0f, a.data(), lda,
                 b.data(), ldb, 0.0f, c.data(), s.n);
      });
    }
    std::printf("%-34s %12.1f %12.1f\n", s.what, flops / dnnl / 1e9,
                openblas ? flops / blas / 1e9 : 0.0);
  }
  if (!openblas) std::printf("(OpenBLAS not found: apt-get install libopenblas0-pthread)\n");
}
