// The `quantization` family's CUDA kernels (backend/cuda/quantization.cu) against the CPU kernels:
// the 4-bit codec bit for bit, and the 4-bit linear's forward and input gradient, f32 / bf16 / f16
// compute, NF4 and FP4, with and without double quantization. Skipped without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <vector>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "cuda/cuda_test_support.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "quant/linear_4bit.h"
#include "quant/quant_4bit.h"

namespace headroom {
namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.to(kCPU).contiguous();
  const auto* p = static_cast<const uint8_t*>(host.data_ptr());
  return std::vector<uint8_t>(p, p + host.nbytes());
}

// A weight quantized on the GPU is the CPU's, byte for byte: codes, absmax, the nested
// statistics and the offset (normal values: the CPU flushes subnormals, the GPU does not), for
// odd sizes (a short last block and an odd element count) and a weight of more than one
// nested block; dequantized on the GPU it is the CPU's too.
TEST(CudaQuantization, CodecIsTheCpusBitForBit) {
  REQUIRE_GPU();
  for (const bool nested : {false, true}) {
    for (const Quant4bitType type : {Quant4bitType::nf4, Quant4bitType::fp4}) {
      for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        for (const Shape& shape : {Shape{7, 9}, Shape{150, 96}, Shape{1000, 1100}}) {
          SCOPED_TRACE(str_cat(quant_4bit_type_name(type), nested ? " nested " : " ",
                               dtype_name(dtype), " ", shape));
          Quant4bitConfig config;
          config.quant_type = type;
          config.double_quant = nested;
          Generator g(12);
          const Tensor w = Tensor::randn(shape, DType::f32, kCPU, &g).to(dtype);
          const Quant4bitWeight c = quantize_4bit(w, config);
          const Quant4bitWeight d = quantize_4bit(w.to(kGpu), config);
          EXPECT_EQ(bytes_of(d.packed), bytes_of(c.packed));
          EXPECT_EQ(bytes_of(d.absmax), bytes_of(c.absmax));
          if (nested) {
            EXPECT_EQ(bytes_of(d.nested_absmax), bytes_of(c.nested_absmax));
            EXPECT_EQ(bytes_of(d.nested_code), bytes_of(c.nested_code));
            EXPECT_EQ(std::bit_cast<uint32_t>(d.offset), std::bit_cast<uint32_t>(c.offset));
          }
          EXPECT_EQ(bytes_of(dequantize_4bit(d, dtype)), bytes_of(dequantize_4bit(c, dtype)));
        }
      }
    }
  }
}

TEST(CudaQuantization, Linear4bitMatchesTheCpuKernel) {
  REQUIRE_GPU();
  for (const bool nested : {false, true}) {
    for (const Quant4bitType type : {Quant4bitType::nf4, Quant4bitType::fp4}) {
      for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        SCOPED_TRACE(
            str_cat(quant_4bit_type_name(type), nested ? " nested " : " ", dtype_name(dtype)));
        Quant4bitConfig config;
        config.quant_type = type;
        config.double_quant = nested;
        Generator g(11);
        const Tensor w = Tensor::randn({150, 96}, DType::f32, kCPU, &g);
        const Quant4bitWeight q_cpu = quantize_4bit(w, config);
        const Quant4bitWeight q_gpu = quantize_4bit(w.to(kGpu), config);
        const Tensor x = Tensor::randn({70, 96}, DType::f32, kCPU, &g).to(dtype);
        const Tensor bias = Tensor::randn({150}, DType::f32, kCPU, &g).to(dtype);
        const Tensor dy = Tensor::randn({70, 150}, DType::f32, kCPU, &g).to(dtype);

        const Tensor xc = x.clone().set_requires_grad(true);
        const Tensor yc = linear_4bit(xc, q_cpu, bias, dtype);
        backward(sum(mul(yc, dy)));
        const Tensor xg = x.to(kGpu).set_requires_grad(true);
        const Tensor yg = linear_4bit(xg, q_gpu, bias.to(kGpu), dtype);
        backward(sum(mul(yg, dy.to(kGpu))));
        synchronize_gpu();
        // Sums in another order: within fp32 rounding, or one rounding of the compute dtype.
        const Tolerance tol{dtype == DType::f32 ? 1e-5 : 1e-2, dtype == DType::f32 ? 1e-6 : 1e-3};
        expect_close(yg, yc, tol, "y");
        expect_close(xg.grad(), xc.grad(), tol, "grad x");
      }
    }
  }
}

}  // namespace
}  // namespace headroom
