// FP8 quantization against tools/gen_fp8_golden.py (TE's formulas, ml_dtypes casts), byte for
// byte: delayed and current per-tensor scaling in E4M3 and E5M2, MXFP8's 1 x 32 E8M0 blocks,
// Float8BlockScaling's 1 x 128 and 128 x 128 blocks, each from f32 and from bf16 inputs; the
// overflow / underflow counts; dequantization; and the CPU FP8 GEMM against an exact reference.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "amp/fp8_golden.h"
#include "backend/backend.h"
#include "optim/golden_lines.h"
#include "quant/fp8_tensor.h"

namespace headroom {
namespace {

using fp8_test::read_hex_bytes;
using fp8_test::read_hex_floats;

struct QuantizeCase {
  std::string name, recipe, format;
  int64_t rows = 0, cols = 0;
  Fp8BlockShape block;
  float scale = 1.0f;
  std::vector<float> input, scale_inv, amax;
  std::vector<uint8_t> bytes, e8m0;
  int64_t overflow = 0, underflow = 0;
};

std::vector<QuantizeCase> quantize_cases() {
  std::vector<QuantizeCase> cases;
  optim_test::for_each_fixture_line(fp8_test::kFp8Golden,
                                    [&](const std::string& key, std::istringstream& in) {
                                      if (key == "quantize") {
                                        QuantizeCase c;
                                        in >> c.name >> c.recipe >> c.format >> c.rows >> c.cols >>
                                            c.block.block_rows >> c.block.block_cols;
                                        c.block.e8m0 = c.recipe == "mxfp8";
                                        std::string scale;
                                        if (in >> scale) c.scale = fp8_test::hex_f32(scale);
                                        cases.push_back(c);
                                      } else if (cases.empty()) {
                                        return;
                                      } else if (key == "input") {
                                        cases.back().input = read_hex_floats(in);
                                      } else if (key == "bytes") {
                                        cases.back().bytes = read_hex_bytes(in);
                                      } else if (key == "scale_inv") {
                                        cases.back().scale_inv = read_hex_floats(in);
                                      } else if (key == "exponents") {
                                        cases.back().e8m0 = read_hex_bytes(in);
                                      } else if (key == "amax") {
                                        cases.back().amax = read_hex_floats(in);
                                      } else if (key == "counts") {
                                        in >> cases.back().overflow >> cases.back().underflow;
                                      }
                                    });
  return cases;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return {p, p + t.nbytes()};
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(detail::f32_bits(f));
  return out;
}

TEST(Fp8Quantize, EveryRecipeMatchesTransformerEngineFormulasByteForByte) {
  const std::vector<QuantizeCase> cases = quantize_cases();
  ASSERT_EQ(cases.size(), 8u);
  for (const QuantizeCase& c : cases) {
    for (DType input_dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(c.name + " from " + dtype_name(input_dtype));
      const Tensor x = Tensor::from_floats(c.input, {c.rows, c.cols}).to(input_dtype);
      const DType fp8 = c.format == "e5m2" ? DType::f8_e5m2 : DType::f8_e4m3fn;
      const Tensor counts = Tensor::zeros({2}, DType::i64);
      Fp8Tensor q;
      if (c.recipe == "delayed" || c.recipe == "current") {
        const Tensor scale = Tensor::full({1}, c.scale);
        const Tensor amax = Tensor::zeros({1});
        q = fp8_quantize_tensorwise(x, fp8, scale, c.recipe == "current", amax, counts);
        EXPECT_EQ(bits_of(amax.to_float_vector()), bits_of(c.amax));
      } else {
        q = fp8_quantize_blockwise(x, fp8, c.block, counts);
      }
      EXPECT_EQ(q.data.dtype(), fp8);
      EXPECT_EQ(bytes_of(q.data), c.bytes);
      if (c.block.e8m0) {
        EXPECT_EQ(bytes_of(q.scales), c.e8m0);
      } else {
        EXPECT_EQ(bits_of(q.scales.to_float_vector()), bits_of(c.scale_inv));
      }
      EXPECT_EQ(counts.to_int64_vector(), (std::vector<int64_t>{c.overflow, c.underflow}));
    }
  }
}

TEST(Fp8Quantize, DequantizeIsTheFp8ValueTimesItsScale) {
  for (const QuantizeCase& c : quantize_cases()) {
    SCOPED_TRACE(c.name);
    const DType fp8 = c.format == "e5m2" ? DType::f8_e5m2 : DType::f8_e4m3fn;
    const Tensor x = Tensor::from_floats(c.input, {c.rows, c.cols});
    const Fp8Tensor q = c.block.block_rows == 0
                            ? fp8_quantize_tensorwise(x, fp8, Tensor::full({1}, c.scale),
                                                      c.recipe == "current", Tensor::zeros({1}))
                            : fp8_quantize_blockwise(x, fp8, c.block);
    const std::vector<float> out = fp8_dequantize(q, DType::f32).to_float_vector();
    const std::vector<float> values = q.data.to(DType::f32).to_float_vector();
    const std::vector<float> scales =
        c.block.e8m0 ? std::vector<float>() : q.scales.to_float_vector();
    const int64_t bcols =
        c.block.block_rows == 0 ? 1 : (c.cols + c.block.block_cols - 1) / c.block.block_cols;
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t col = 0; col < c.cols; ++col) {
        const int64_t i = r * c.cols + col;
        float s;
        if (c.block.block_rows == 0) {
          s = scales[0];
        } else {
          const int64_t b = (r / c.block.block_rows) * bcols + col / c.block.block_cols;
          s = c.block.e8m0 ? std::ldexp(1.0f, int{c.e8m0[static_cast<size_t>(b)]} - 127)
                           : scales[static_cast<size_t>(b)];
        }
        ASSERT_EQ(detail::f32_bits(out[static_cast<size_t>(i)]),
                  detail::f32_bits(values[static_cast<size_t>(i)] * s))
            << "row " << r << " col " << col;
      }
    }
  }
}

TEST(Fp8Gemm, CpuWidensExactlyAndScalesOnce) {
  // a [m, k] @ b [n, k]^T with per-tensor scales; the products of FP8 values are exact in fp32,
  // so a double reference differs only by fp32 summation: k terms, |error| <= k * eps * sum|.|.
  const int64_t m = 5, n = 7, k = 48;
  const Tensor a = Tensor::randn({m, k}).to(DType::f8_e4m3fn, Overflow::saturate);
  const Tensor b = Tensor::randn({n, k}).to(DType::f8_e5m2, Overflow::saturate);
  const Tensor sa = Tensor::full({1}, 0.375), sb = Tensor::full({1}, 3.0);
  const Tensor bias = Tensor::randn({n}).to(DType::bf16);
  const Tensor c = Tensor::empty({m, n}, DType::bf16);
  need_kernel("test", kCPU, &GemmKernels::gemm_fp8)(a, sa, b, sb, c, bias);
  const std::vector<float> av = a.to(DType::f32).to_float_vector(),
                           bv = b.to(DType::f32).to_float_vector(),
                           biasv = bias.to(DType::f32).to_float_vector(),
                           cv = c.to(DType::f32).to_float_vector();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0, mag = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        sum += double{av[i * k + p]} * bv[j * k + p];
        mag += std::fabs(double{av[i * k + p]} * bv[j * k + p]);
      }
      const double want = sum * 0.375 * 3.0 + biasv[j];
      // bf16 rounding of c (2^-8 relative) plus fp32 summation.
      EXPECT_NEAR(cv[i * n + j], want, std::fabs(want) * 0x1p-8 + mag * 1.125 * k * 0x1p-24)
          << i << ", " << j;
    }
  }
  // cuBLASLt's FP8 kernels take a bias of c's dtype, bf16 or f16: every backend refuses others.
  const Tensor c32 = Tensor::empty({m, n});
  EXPECT_THROW(
      need_kernel("test", kCPU, &GemmKernels::gemm_fp8)(a, sa, b, sb, c32, bias.to(DType::f32)),
      ValueError);
}

}  // namespace
}  // namespace headroom
