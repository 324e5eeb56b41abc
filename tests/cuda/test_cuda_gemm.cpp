// cuBLASLt GEMMs against the CPU reference: the gemm entry (transposes, strides, broadcast batches,
// alpha / beta, bias and bias+GELU epilogues), linear and matmul forward and backward in f32 /
// bf16 / f16, repeatability, the workspace, and allocations equal to a meta dry run. Skipped
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "backend/backend.h"
#include "backend/cuda/cublaslt_library.h"
#include "backend/cuda/cuda_stream.h"
#include "backend/cuda/gemm.h"
#include "backend/gemm_kernels.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "cuda/cuda_test_support.h"
#include "memory/device_memory.h"
#include "ops/activation.h"
#include "ops/linear.h"
#include "ops/view_ops.h"
#include "ops/op_support.h"
#include "ops/reduction.h"

namespace headroom {
namespace {

// Relative tolerance per output dtype: fp32 accumulation in another order (f32), plus the one
// rounding of the result (bf16: 2^-8 relative, f16: 2^-11).
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1e-2;
    case DType::f16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

// |got - ref| <= rtol * (|ref| + max |ref|): relative where the result is large, scaled by the
// largest element where it cancels to near zero (a sum of k products carries error of that size).
void expect_close(const Tensor& ref, const Tensor& got, double rtol, const std::string& what) {
  ASSERT_EQ(ref.shape(), got.shape()) << what;
  const std::vector<float> r = ref.to(kCPU).to(DType::f32).to_float_vector();
  const std::vector<float> g = got.to(kCPU).to(DType::f32).to_float_vector();
  double largest = 0.0;
  for (float v : r) largest = std::max(largest, static_cast<double>(std::abs(v)));
  size_t bad = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const double error = std::abs(static_cast<double>(g[i]) - r[i]);
    if (!(error <= rtol * (std::abs(r[i]) + largest)) && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << " on the GPU, " << r[i]
                    << " on the CPU";
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_EQ(a.to(kCPU).to(DType::f32).to_float_vector(),
            b.to(kCPU).to(DType::f32).to_float_vector())
      << what;
}

// Random values representable in `dtype` (normal, times `scale`), on the CPU in that dtype.
Tensor random(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  std::vector<float> values = Tensor::randn(shape, DType::f32, kCPU, &gen).to_float_vector();
  for (float& v : values) v = static_cast<float>(v * scale);
  return Tensor::from_floats(values, shape).to(dtype);
}

// f32 on the CPU requiring grad (the reference), and the same values in `dtype` on the GPU.
struct Pair {
  Tensor cpu;
  Tensor gpu;
};

Pair pair_of(const Tensor& values, DType dtype) {
  Pair p;
  // Copies, not views: to(f32) of an f32 tensor is the tensor itself, and once it requires grad
  // its to(kGpu) would be a differentiable copy (no leaf) whose gradient flows to the CPU leaf.
  p.cpu = values.to(DType::f32).clone();
  p.cpu.set_requires_grad(true);
  p.gpu = values.detach().to(dtype).to(kGpu);
  p.gpu.set_requires_grad(true);
  return p;
}

const GemmKernels& cuda_ops() {
  const KernelTables* tables = find_kernel_tables(DeviceType::cuda);
  EXPECT_NE(tables, nullptr);
  const GemmKernels& ops = std::get<GemmKernels>(*tables);
  EXPECT_TRUE(ops.gemm);
  return ops;
}

// ---- the entry itself

// c = alpha * op(a) @ op(b) + beta * c0 in double on the host; a, b, c0 row-major 2-D.
std::vector<double> reference_gemm(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b,
                                   float alpha, float beta, const Tensor& c0) {
  const std::vector<float> av = a.to(DType::f32).contiguous().to_float_vector();
  const std::vector<float> bv = b.to(DType::f32).contiguous().to_float_vector();
  const std::vector<float> cv = c0.to(DType::f32).contiguous().to_float_vector();
  const int64_t m = trans_a ? a.size(1) : a.size(0);
  const int64_t k = trans_a ? a.size(0) : a.size(1);
  const int64_t n = trans_b ? b.size(0) : b.size(1);
  std::vector<double> out(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = trans_a ? av[p * m + i] : av[i * k + p];
        const double y = trans_b ? bv[j * k + p] : bv[p * n + j];
        sum += x * y;
      }
      out[i * n + j] = alpha * sum + beta * cv[i * n + j];
    }
  }
  return out;
}

void expect_near_reference(const std::vector<double>& ref, const Tensor& got, double rtol,
                           const std::string& what) {
  const std::vector<float> g = got.to(kCPU).to(DType::f32).contiguous().to_float_vector();
  ASSERT_EQ(ref.size(), g.size()) << what;
  double largest = 0.0;
  for (double v : ref) largest = std::max(largest, std::abs(v));
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!(std::abs(g[i] - ref[i]) <= rtol * (std::abs(ref[i]) + largest)) && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

// Needs no GPU: the library that headroom opens on the first GEMM is found and has every
// function the gemm entry calls (here the toolkit's copy; on a GPU machine, that machine's).
TEST(CudaGemm, OpensCublasLtWithEveryFunction) {
  const cuda::CublasLt& lt = cuda::cublaslt();
  EXPECT_NE(lt.create, nullptr);
  EXPECT_NE(lt.matmul, nullptr);
  EXPECT_NE(lt.matrix_layout_set_attribute, nullptr);
  EXPECT_STREQ(lt.get_status_string(CUBLAS_STATUS_SUCCESS), "success");
}

TEST(CudaGemm, EntryTransposesAlphaBetaAndAStridedC) {
  REQUIRE_GPU();
  const GemmKernels& ops = cuda_ops();
  const int64_t m = 37, n = 29, k = 45;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (DType c_dtype : {DType::f32, dtype}) {
      for (int t = 0; t < 4; ++t) {
        const bool trans_a = t & 1, trans_b = t & 2;
        const Tensor a = random(trans_a ? Shape{k, m} : Shape{m, k}, dtype, 1 + t);
        const Tensor b = random(trans_b ? Shape{n, k} : Shape{k, n}, dtype, 11 + t);
        const Tensor c0 = random({m, n}, c_dtype, 21 + t);
        // c lives in the first n columns of a wider buffer: ld = n + 5, the rest untouched.
        const Tensor wide = Tensor::full({m, n + 5}, 7.0, c_dtype, kGpu);
        const Tensor c = wide.narrow(1, 0, n);
        c.copy_(c0.to(kGpu));
        ops.gemm(trans_a, trans_b, a.to(kGpu), b.to(kGpu), 0.5f, 2.0f, c, GemmEpilogue::none,
                 Tensor());
        const std::string what = std::string(dtype_name(dtype)) + " -> " + dtype_name(c_dtype) +
                                 " trans " + std::to_string(t);
        expect_near_reference(reference_gemm(trans_a, trans_b, a, b, 0.5f, 2.0f, c0), c,
                              tolerance(c_dtype), what);
        const std::vector<float> pad =
            wide.narrow(1, n, 5).to(kCPU).to(DType::f32).contiguous().to_float_vector();
        EXPECT_TRUE(std::all_of(pad.begin(), pad.end(), [](float v) { return v == 7.0f; })) << what;
      }
    }
  }
}

TEST(CudaGemm, EntryBroadcastsABatchWithStrideZero) {
  REQUIRE_GPU();
  const GemmKernels& ops = cuda_ops();
  const int64_t batch = 5, m = 33, n = 17, k = 40;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor a = random({m, k}, dtype, 3);  // shared by every batch
    const Tensor b = random({batch, k, n}, dtype, 4);
    const Tensor c = Tensor::empty({batch, m, n}, dtype, kGpu);
    ops.gemm(false, false, a.to(kGpu).unsqueeze(0).expand({batch, m, k}), b.to(kGpu), 1.0f, 0.0f, c,
             GemmEpilogue::none, Tensor());
    for (int64_t i = 0; i < batch; ++i) {
      const Tensor zero = Tensor::zeros({m, n});
      expect_near_reference(reference_gemm(false, false, a, b.select(0, i), 1.0f, 0.0f, zero),
                            c.select(0, i), tolerance(dtype),
                            std::string(dtype_name(dtype)) + " batch " + std::to_string(i));
    }
  }
}

TEST(CudaGemm, EntryBiasAndGeluEpilogues) {
  REQUIRE_GPU();
  const GemmKernels& ops = cuda_ops();
  const int64_t rows = 70, in = 96, out = 130;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor x = random({rows, in}, dtype, 5);
    const Tensor w = random({out, in}, dtype, 6, 0.2);
    const Tensor bias = random({out}, dtype, 7);
    const Tensor reference = linear(x.to(DType::f32), w.to(DType::f32), bias.to(DType::f32));
    for (GemmEpilogue epilogue : {GemmEpilogue::bias, GemmEpilogue::bias_gelu}) {
      const Tensor c = Tensor::empty({rows, out}, dtype, kGpu);
      ops.gemm(false, true, x.to(kGpu), w.to(kGpu), 1.0f, 0.0f, c, epilogue, bias.to(kGpu));
      const bool gelu_applied = epilogue == GemmEpilogue::bias_gelu;
      // cuBLASLt's GELU is the tanh form as ours, but its tanh is its own: 1e-4 in f32.
      const double rtol = gelu_applied ? std::max(tolerance(dtype), 1e-4) : tolerance(dtype);
      expect_close(gelu_applied ? gelu(reference) : reference, c, rtol,
                   std::string(dtype_name(dtype)) + (gelu_applied ? " bias+gelu" : " bias"));
    }
  }
}

// The bias-gradient epilogues beside dW = g^T x ([out, in] weights: the sums of op(a) = g^T)
// and x^T g ([in, out]: of op(b) = g), with c and the sums in the operands' dtype or in f32 (an
// autocast weight's gradient); the sums are g's column sums, computed here in f32 from g.
TEST(CudaGemm, EntryBiasGradientEpilogues) {
  REQUIRE_GPU();
  const GemmKernels& ops = cuda_ops();
  const int64_t rows = 300, in = 96, out = 130;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (DType result : {dtype, DType::f32}) {
      const Tensor x = random({rows, in}, dtype, 8);
      const Tensor g = random({rows, out}, dtype, 9);
      const Tensor column_sums = sum(g.to(DType::f32), 0);
      for (GemmEpilogue epilogue : {GemmEpilogue::bias_grad_a, GemmEpilogue::bias_grad_b}) {
        const bool of_a = epilogue == GemmEpilogue::bias_grad_a;
        const Tensor c = Tensor::empty(of_a ? Shape{out, in} : Shape{in, out}, result, kGpu);
        const Tensor db = Tensor::empty({out}, result, kGpu);
        if (of_a) {
          ops.gemm(true, false, g.to(kGpu), x.to(kGpu), 1.0f, 0.0f, c, epilogue, db);
        } else {
          ops.gemm(true, false, x.to(kGpu), g.to(kGpu), 1.0f, 0.0f, c, epilogue, db);
        }
        const Tensor zero = Tensor::zeros(c.shape());
        const std::vector<double> reference =
            of_a ? reference_gemm(true, false, g, x, 1.0f, 0.0f, zero)
                 : reference_gemm(true, false, x, g, 1.0f, 0.0f, zero);
        const std::string what = std::string(dtype_name(dtype)) + " into " + dtype_name(result) +
                                 (of_a ? " dbias of a" : " dbias of b");
        // The result dtype's rounding over fp32 accumulation (tolerance() above).
        expect_near_reference(reference, c, tolerance(result), what);
        expect_close(column_sums.to(result), db, tolerance(result), what + " sums");
      }
    }
  }
}

// ---- linear

struct LinearCase {
  int64_t rows, in, out;
};

void check_linear(DType dtype, WeightLayout layout, const LinearCase& s, bool with_bias) {
  const std::string what = std::string(dtype_name(dtype)) +
                           (layout == WeightLayout::out_in ? " out_in " : " in_out ") +
                           std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" +
                           std::to_string(s.out) + (with_bias ? " bias" : "");
  const Shape w_shape = layout == WeightLayout::out_in ? Shape{s.out, s.in} : Shape{s.in, s.out};
  const Pair x = pair_of(random({s.rows, s.in}, dtype, 31), dtype);
  const Pair w =
      pair_of(random(w_shape, dtype, 32, 1.0 / std::sqrt(static_cast<double>(s.in))), dtype);
  const Pair b = pair_of(random({s.out}, dtype, 33), dtype);
  const Tensor g = random({s.rows, s.out}, dtype, 34);
  const Tensor ref = linear(x.cpu, w.cpu, with_bias ? b.cpu : Tensor(), layout);
  const Tensor got = linear(x.gpu, w.gpu, with_bias ? b.gpu : Tensor(), layout);
  EXPECT_EQ(got.dtype(), dtype) << what;
  expect_close(ref, got, tolerance(dtype), what + " forward");
  backward(ref, g.to(DType::f32));
  backward(got, g.to(kGpu));
  EXPECT_EQ(x.gpu.grad().dtype(), dtype) << what;
  EXPECT_EQ(w.gpu.grad().dtype(), dtype) << what;
  expect_close(x.cpu.grad(), x.gpu.grad(), tolerance(dtype), what + " dx");
  expect_close(w.cpu.grad(), w.gpu.grad(), tolerance(dtype), what + " dweight");
  if (with_bias) {
    EXPECT_EQ(b.gpu.grad().dtype(), dtype) << what;
    expect_close(b.cpu.grad(), b.gpu.grad(), tolerance(dtype), what + " dbias");
  }
}

TEST(CudaGemm, LinearMatchesTheCpu) {
  REQUIRE_GPU();
  // Odd sizes, sizes past one tile / block, and a 3-D input below.
  const LinearCase cases[] = {{1, 1, 1}, {3, 5, 7}, {300, 257, 129}, {513, 64, 1000}};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
      for (const LinearCase& s : cases) {
        for (bool with_bias : {true, false}) check_linear(dtype, layout, s, with_bias);
      }
    }
  }
}

TEST(CudaGemm, LinearLargeBf16MatchesTheCpu) {
  REQUIRE_GPU();
  check_linear(DType::bf16, WeightLayout::out_in, {4096, 768, 3072}, true);
  check_linear(DType::f32, WeightLayout::in_out, {2048, 1024, 1024}, true);
}

TEST(CudaGemm, LinearOfA3dNonContiguousInput) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor values = random({6, 4, 40}, dtype, 41);
    const Tensor w = random({24, 40}, dtype, 42, 0.2);
    const Tensor ref = linear(values.to(DType::f32).transpose(0, 1), w.to(DType::f32));
    const Tensor got = linear(values.to(kGpu).transpose(0, 1), w.to(kGpu));
    expect_close(ref, got, tolerance(dtype), dtype_name(dtype));
  }
}

// Mixed dtypes multiply in f32 and give x's dtype, as the CPU.
TEST(CudaGemm, LinearOfMixedDtypes) {
  REQUIRE_GPU();
  const Tensor x = random({19, 33}, DType::bf16, 51);
  const Tensor w = random({21, 33}, DType::f32, 52);
  const Tensor ref = linear(x.to(DType::f32), w).to(DType::bf16);
  const Tensor got = linear(x.to(kGpu), w.to(kGpu));
  EXPECT_EQ(got.dtype(), DType::bf16);
  expect_close(ref, got, tolerance(DType::bf16), "bf16 x, f32 weight");
}

// ---- matmul

void check_matmul(DType dtype, const Tensor& a_values, const Tensor& b_values,
                  const std::function<Tensor(const Tensor&)>& view_b, const std::string& what) {
  const Pair a = pair_of(a_values, dtype);
  const Pair b = pair_of(b_values, dtype);
  const Tensor ref = matmul(a.cpu, view_b(b.cpu));
  const Tensor got = matmul(a.gpu, view_b(b.gpu));
  EXPECT_EQ(got.dtype(), dtype) << what;
  expect_close(ref, got, tolerance(dtype), what + " forward");
  const Tensor g = random(ref.shape(), dtype, 61);
  backward(ref, g.to(DType::f32));
  backward(got, g.to(kGpu));
  expect_close(a.cpu.grad(), a.gpu.grad(), tolerance(dtype), what + " da");
  expect_close(b.cpu.grad(), b.gpu.grad(), tolerance(dtype), what + " db");
}

TEST(CudaGemm, MatmulMatchesTheCpu) {
  REQUIRE_GPU();
  const auto as_is = [](const Tensor& t) { return t; };
  // The op, not Tensor::transpose (a raw view that autograd does not see).
  const auto transposed = [](const Tensor& t) { return transpose(t, -1, -2); };
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const std::string name = dtype_name(dtype);
    check_matmul(dtype, random({7, 5}, dtype, 1), random({5, 3}, dtype, 2), as_is, name + " 2-D");
    check_matmul(dtype, random({3, 37, 45}, dtype, 3), random({45, 29}, dtype, 4), as_is,
                 name + " shared b");
    check_matmul(dtype, random({45, 29}, dtype, 5), random({3, 29, 37}, dtype, 6), as_is,
                 name + " shared a");
    check_matmul(dtype, random({2, 3, 17, 33}, dtype, 7), random({2, 1, 33, 9}, dtype, 8), as_is,
                 name + " broadcast heads");
    check_matmul(dtype, random({4, 2, 65, 64}, dtype, 9), random({4, 2, 130, 64}, dtype, 10),
                 transposed, name + " q @ k^T");
    check_matmul(dtype, random({2, 300, 257}, dtype, 11), random({2, 257, 129}, dtype, 12), as_is,
                 name + " batched");
  }
}

// ---- repeatability, workspace, allocations

TEST(CudaGemm, RunsRepeatBitForBit) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = random({1000, 512}, dtype, 71).to(kGpu);
    const Tensor w = random({768, 512}, dtype, 72).to(kGpu);
    const Tensor b = random({768}, dtype, 73).to(kGpu);
    expect_same_bits(linear(x, w, b), linear(x, w, b), dtype_name(dtype));
    expect_same_bits(matmul(x, w.transpose(0, 1)), matmul(x, w.transpose(0, 1)), dtype_name(dtype));
  }
}

// See Note [cuBLASLt workspace]: one per device and stream, from the caching allocator, kept.
TEST(CudaGemm, WorkspaceIsAllocatedOncePerStream) {
  REQUIRE_GPU();
  const Tensor a = random({64, 64}, DType::bf16, 81).to(kGpu);
  { const Tensor warm = matmul(a, a); }
  const size_t allocated = memory_allocated(kGpu);
  EXPECT_GE(allocated, cuda::kGemmWorkspaceBytes);
  { const Tensor again = matmul(a, a); }
  EXPECT_EQ(memory_allocated(kGpu), allocated);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    // A second stream gets a workspace of its own.
    cuda::StreamGuard guard(stream);
    const Tensor on_stream = matmul(a, a);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  EXPECT_EQ(memory_allocated(kGpu), allocated + cuda::kGemmWorkspaceBytes);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// The GPU run allocates exactly what a meta dry run in the native pattern does.
TEST(CudaGemm, AllocationsMatchAMetaDryRun) {
  REQUIRE_GPU();
  {
    const Tensor warm =
        matmul(Tensor::ones({8, 8}, DType::bf16, kGpu), Tensor::ones({8, 8}, DType::bf16, kGpu));
  }  // the workspace
  auto run = [](Device device) {
    Tensor x = Tensor::zeros({4, 128, 256}, DType::bf16, device).set_requires_grad(true);
    Tensor w = Tensor::zeros({384, 256}, DType::bf16, device).set_requires_grad(true);
    Tensor b = Tensor::zeros({384}, DType::bf16, device).set_requires_grad(true);
    Tensor v = Tensor::zeros({384, 64}, DType::bf16, device).set_requires_grad(true);
    const Tensor g = Tensor::zeros({4, 128, 64}, DType::bf16, device);
    const size_t before = memory_allocated(device);
    reset_peak_memory_stats(device);
    {
      Tensor out = matmul(linear(x, w, b), v);
      backward(out, g);
    }
    return std::pair{max_memory_allocated(device) - before, memory_allocated(device) - before};
  };
  const auto gpu = run(kGpu);
  const auto meta = run(kMeta);
  EXPECT_EQ(gpu.first, meta.first) << "peak";
  EXPECT_EQ(gpu.second, meta.second) << "kept";
}

}  // namespace
}  // namespace headroom
