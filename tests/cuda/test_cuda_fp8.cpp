// The FP8 family's CUDA kernels (backend/cuda/fp8.cu) and the cuBLASLt FP8 GEMM against the CPU:
// quantized bytes, scales, amaxes and counts of every recipe bit for bit (both share
// core/fp8_scaling.h), dequantization, delayed scaling's update, and the GEMM within fp32
// summation order. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "core/generator.h"
#include "cuda/cuda_test_support.h"
#include "quant/fp8_tensor.h"

namespace headroom {
namespace {

std::vector<uint8_t> host_bytes(const Tensor& t) {
  const Tensor h = t.to(kCPU);
  const auto* p = static_cast<const uint8_t*>(h.data_ptr());
  return {p, p + h.nbytes()};
}

// Inputs with rows of different magnitudes, zeros, a NaN-free tail of tiny values.
Tensor fp8_input(int64_t rows, int64_t cols, uint64_t seed) {
  Generator g(seed);
  Tensor x = Tensor::randn({rows, cols}, DType::f32, kCPU, &g);
  std::vector<float> v = x.to_float_vector();
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 9) * 3 - 12);
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] *= scale;
  }
  for (int64_t c = 0; c < std::min<int64_t>(cols, 40); ++c) v[c] = 0.0f;
  return Tensor::from_floats(v, {rows, cols});
}

TEST(CudaFp8, QuantizeMatchesTheCpuBitForBit) {
  REQUIRE_GPU();
  const std::vector<Fp8BlockShape> blocks = {
      {0, 0, false}, {1, 32, true}, {1, 128, false}, {128, 128, false}};
  for (const DType fp8 : {DType::f8_e4m3fn, DType::f8_e5m2}) {
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (const Fp8BlockShape& block : blocks) {
        for (const bool current : {false, true}) {
          if (!fp8_per_tensor(block) && current) continue;
          SCOPED_TRACE(str_cat(dtype_name(fp8), " from ", dtype_name(dtype), " block ",
                               block.block_rows, "x", block.block_cols, current ? " current" : ""));
          const Tensor x = fp8_input(300, 260, 5).to(dtype);
          const Tensor counts_cpu = Tensor::zeros({2}, DType::i64);
          const Tensor counts_gpu = Tensor::zeros({2}, DType::i64, kGpu);
          Fp8Tensor qc, qg;
          Tensor amax_cpu = Tensor::full({1}, 0.5), amax_gpu = amax_cpu.to(kGpu);
          Tensor scale_cpu = Tensor::full({1}, 3.0e3), scale_gpu = scale_cpu.to(kGpu);
          if (fp8_per_tensor(block)) {
            qc = fp8_quantize_tensorwise(x, fp8, scale_cpu, current, amax_cpu, counts_cpu);
            qg = fp8_quantize_tensorwise(x.to(kGpu), fp8, scale_gpu, current, amax_gpu, counts_gpu);
            expect_same_bits(amax_cpu.to_float_vector(), amax_gpu.to(kCPU).to_float_vector(),
                             "amax");
            expect_same_bits(scale_cpu.to_float_vector(), scale_gpu.to(kCPU).to_float_vector(),
                             "scale");
          } else {
            qc = fp8_quantize_blockwise(x, fp8, block, counts_cpu);
            qg = fp8_quantize_blockwise(x.to(kGpu), fp8, block, counts_gpu);
          }
          EXPECT_EQ(host_bytes(qg.data), host_bytes(qc.data));
          EXPECT_EQ(host_bytes(qg.scales), host_bytes(qc.scales));
          EXPECT_EQ(counts_gpu.to(kCPU).to_int64_vector(), counts_cpu.to_int64_vector());
          for (const DType out : {DType::f32, DType::bf16}) {
            EXPECT_EQ(host_bytes(fp8_dequantize(qg, out)), host_bytes(fp8_dequantize(qc, out)));
          }
        }
      }
    }
  }
}

TEST(CudaFp8, DelayedScalingUpdateMatchesTheCpu) {
  REQUIRE_GPU();
  const Tensor history = Tensor::from_floats(
      {3.0f, 0.0f, 7.0f, 1.0f, 0.0f, 0.0f, 2.0f, 9.0f, 1e-39f, 4.0f, 5.0f, 6.0f}, {3, 4});
  const Tensor scaled_max = Tensor::from_floats({448.0f, 57344.0f, 224.0f}, {3});
  for (const AmaxComputeAlgo algo : {AmaxComputeAlgo::max, AmaxComputeAlgo::most_recent}) {
    const Tensor hc = history.clone(), hg = history.to(kGpu);
    const Tensor sc = Tensor::full({3}, 2.0), sg = sc.to(kGpu);
    const Tensor ic = Tensor::ones({3}), ig = ic.to(kGpu);
    need_kernel("test", kCPU, &Fp8Kernels::delayed_scaling_update)(hc, scaled_max, algo, sc, ic);
    need_kernel("test", kGpu, &Fp8Kernels::delayed_scaling_update)(hg, scaled_max.to(kGpu), algo,
                                                                   sg, ig);
    expect_same_bits(hc.to_float_vector(), hg.to(kCPU).to_float_vector(), "history");
    expect_same_bits(sc.to_float_vector(), sg.to(kCPU).to_float_vector(), "scale");
    expect_same_bits(ic.to_float_vector(), ig.to(kCPU).to_float_vector(), "scale_inv");
  }
}

TEST(CudaFp8, CublasLtGemmMatchesTheCpuWithinSummationOrder) {
  REQUIRE_GPU();
  // The same FP8 operands and scales: the products are exact in fp32, so the GPU and the CPU
  // differ in the order and the precision of their sums (Hopper's FP8 tensor cores accumulate in
  // about 14 bits: 2^-11 of the largest magnitude, Note [CUDA op tolerances]) and in the final
  // bf16 rounding (2^-7 relative).
  const int64_t m = 64, n = 48, k = 96;
  Generator g(3);
  const Tensor a =
      Tensor::randn({m, k}, DType::f32, kCPU, &g).to(DType::f8_e4m3fn, Overflow::saturate);
  const Tensor b =
      Tensor::randn({n, k}, DType::f32, kCPU, &g).to(DType::f8_e5m2, Overflow::saturate);
  const Tensor sa = Tensor::full({1}, 0.25), sb = Tensor::full({1}, 3.0);
  const Tensor bias = Tensor::randn({n}, DType::f32, kCPU, &g).to(DType::bf16);
  const Tensor cc = Tensor::empty({m, n}, DType::bf16),
               cg = Tensor::empty({m, n}, DType::bf16, kGpu);
  need_kernel("test", kCPU, &GemmKernels::gemm_fp8)(a, sa, b, sb, cc, bias);
  need_kernel("test", kGpu, &GemmKernels::gemm_fp8)(a.to(kGpu), sa.to(kGpu), b.to(kGpu),
                                                    sb.to(kGpu), cg, bias.to(kGpu));
  expect_close(cg, cc, {0x1p-7, 0x1p-11}, "gemm_fp8");
}

}  // namespace
}  // namespace headroom
