// scaled_dot_product_attention on the GPU's own kernels (backend/cuda/attention.cu; cuDNN, which
// takes most bf16 / f16 calls first, is switched off here: test_cuda_cudnn_attention.cpp tests
// it) against the CPU reference in fp32 on the same (rounded) inputs: outputs and gradients for
// f32 / bf16 / f16, head sizes on the tensor-core path (<= 128) and the CUDA-core path
// (129..256), causal, sliding window and full, GQA, dropout (the same Philox stream), strided
// inputs, odd and large sizes; determinism; and the GPU's allocations against a meta dry run.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "autograd/engine.h"
#include "backend/cuda/cudnn_attention.h"
#include "cuda/attention_test_support.h"
#include "cuda/cuda_test_support.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "memory/device_memory.h"
#include "ops/op_support.h"
#include "ops/ops.h"

namespace headroom {
namespace {

struct Config {
  int64_t b, hq, hkv, tq, tk, d;
  bool causal;
  double dropout_p = 0.0;
  bool transposed = false;             // q, k, v as [B, T, H, D] tensors viewed as [B, H, T, D]
  std::optional<int64_t> window = {};  // sliding window (causal)
};

std::string name_of(const Config& c, DType dtype) {
  return str_cat(dtype_name(dtype), " B", c.b, " Hq", c.hq, " Hkv", c.hkv, " Tq", c.tq, " Tk", c.tk,
                 " D", c.d, c.causal ? " causal" : " full", " p", c.dropout_p,
                 c.transposed ? " transposed" : "",
                 c.window ? str_cat(" window ", *c.window) : std::string());
}

// f32 values representable in the tested dtype; each run builds fresh tensors from them.
struct Operand {
  std::vector<float> values;
  Shape shape;
  Tensor on(DType dtype, Device device) const {
    return Tensor::from_floats(values, shape).to(dtype).to(device);
  }
};

struct Inputs {
  Operand q, k, v, grad_out;
};

Inputs random_inputs(const Config& c, DType dtype, uint64_t seed) {
  Generator g(seed);
  auto draw = [&](const Shape& shape) {
    return Operand{
        Tensor::randn(shape, DType::f32, kCPU, &g).to(dtype).to(DType::f32).to_float_vector(),
        shape};
  };
  Inputs in;
  if (c.transposed) {
    in.q = draw({c.b, c.tq, c.hq, c.d});
    in.k = draw({c.b, c.tk, c.hkv, c.d});
    in.v = draw({c.b, c.tk, c.hkv, c.d});
  } else {
    in.q = draw({c.b, c.hq, c.tq, c.d});
    in.k = draw({c.b, c.hkv, c.tk, c.d});
    in.v = draw({c.b, c.hkv, c.tk, c.d});
  }
  in.grad_out = draw({c.b, c.hq, c.tq, c.d});
  return in;
}

struct Result {
  std::vector<float> out, grad_q, grad_k, grad_v;
};

// Forward and backward of the inputs in `dtype` on `device`; results widened to f32.
Result run(const Config& c, const Inputs& in, DType dtype, Device device) {
  const Tensor q = in.q.on(dtype, device).set_requires_grad(true);
  const Tensor k = in.k.on(dtype, device).set_requires_grad(true);
  const Tensor v = in.v.on(dtype, device).set_requires_grad(true);
  auto view = [&](const Tensor& x) { return c.transposed ? transpose(x, 1, 2) : x; };
  Generator dropout_gen(1234);
  const Tensor out = scaled_dot_product_attention(view(q), view(k), view(v), c.causal, {},
                                                  c.dropout_p, &dropout_gen, c.window);
  EXPECT_EQ(out.dtype(), dtype);
  backward(out, in.grad_out.on(dtype, device));
  EXPECT_EQ(q.grad().dtype(), dtype);
  EXPECT_EQ(k.grad().dtype(), dtype);
  auto host = [](const Tensor& x) { return x.to(kCPU).to(DType::f32).to_float_vector(); };
  return {host(out), host(q.grad()), host(k.grad()), host(v.grad())};
}

void check_against_cpu(const Config& c, DType dtype, uint64_t seed = 7) {
  const std::string name = name_of(c, dtype);
  SCOPED_TRACE(name);
  const Inputs in = random_inputs(c, dtype, seed);
  const Result want = run(c, in, DType::f32, kCPU);
  const Result got = run(c, in, dtype, kGpu);
  expect_close(got.out, want.out, dtype, name + ": out");
  // A window of one key makes every query attend to itself alone: dS = P (dP - D) is 0 in exact
  // arithmetic, so all of dQ and dK is rounding noise, the GPU's dP (an FMA chain or the tensor
  // cores) and D (a butterfly) cancelling in another order than the CPU's. It grows with sqrt(D)
  // and the rows' count: a model of the kernels' rounding order puts it at up to 5.5e-6 for D 160
  // and 140 rows; 1e-5 stays five orders below what a wrong mask, index or scale gives.
  const double noise = c.window == 1 ? 1e-5 : 1e-6;
  expect_close(got.grad_q, want.grad_q, dtype, name + ": grad_q", noise);
  expect_close(got.grad_k, want.grad_k, dtype, name + ": grad_k", noise);
  expect_close(got.grad_v, want.grad_v, dtype, name + ": grad_v");
}

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// Every test here runs our kernels, whatever cuDNN would take.
class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override { cuda::set_cudnn_attention_enabled(false); }
  void TearDown() override { cuda::set_cudnn_attention_enabled(true); }
};

TEST_F(CudaAttention, MatchesCpuOnTensorCoreHeadSizes) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {true, false}) {
        check_against_cpu({2, 4, 2, 130, 130, d, causal}, dtype);
      }
    }
  }
}

TEST_F(CudaAttention, MatchesCpuOnOddSizes) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    check_against_cpu({1, 1, 1, 1, 1, 64, true}, dtype);
    check_against_cpu({1, 3, 1, 7, 7, 64, true}, dtype);
    check_against_cpu({2, 2, 2, 65, 65, 64, true}, dtype);
    check_against_cpu({1, 2, 1, 37, 91, 64, false}, dtype);  // Tq != Tk
    check_against_cpu({1, 2, 2, 91, 37, 128, false}, dtype);
    check_against_cpu({1, 6, 1, 200, 200, 64, true}, dtype);  // group of 6 query heads
  }
}

TEST_F(CudaAttention, MatchesCpuOnOtherHeadSizes) {
  REQUIRE_GPU();
  // Padded on the tensor-core path (to 64 or 128), or on the CUDA-core path above 128.
  for (DType dtype : kDtypes) {
    for (int64_t d : {1, 8, 40, 80, 96, 100, 160, 256}) {
      check_against_cpu({1, 2, 1, 70, 70, d, true}, dtype);
    }
    check_against_cpu({1, 2, 2, 33, 70, 200, false}, dtype);
  }
}

TEST_F(CudaAttention, DropoutUsesTheCpuStream) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    check_against_cpu({2, 4, 2, 100, 100, 64, true, 0.1}, dtype);
    check_against_cpu({1, 2, 2, 50, 77, 128, false, 0.3}, dtype);
    check_against_cpu({1, 2, 1, 40, 40, 160, true, 0.2}, dtype);
  }
}

// Windows shorter than a key tile, spanning several (so whole key tiles are skipped in forward and
// whole query tiles in backward), of one key, on both kernel families, with dropout and GQA.
TEST_F(CudaAttention, SlidingWindowMatchesCpu) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    for (int64_t d : {64, 160}) {
      check_against_cpu({2, 4, 2, 300, 300, d, true, 0.0, false, 5}, dtype);
      check_against_cpu({1, 4, 1, 400, 400, d, true, 0.0, false, 100}, dtype);
      check_against_cpu({1, 2, 2, 70, 70, d, true, 0.0, false, 1}, dtype);
      check_against_cpu({1, 6, 2, 260, 260, d, true, 0.2, true, 65}, dtype);
    }
  }
}

TEST_F(CudaAttention, ReadsStridedViewsInPlace) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    check_against_cpu({2, 4, 2, 96, 96, 64, true, 0.0, true}, dtype);
    check_against_cpu({1, 2, 2, 50, 50, 160, false, 0.0, true}, dtype);
  }
}

TEST_F(CudaAttention, MatchesCpuOnLargeProblems) {
  REQUIRE_GPU();
  check_against_cpu({2, 12, 12, 1024, 1024, 64, true}, DType::bf16);  // a GPT-2 124M layer
  check_against_cpu({1, 8, 2, 1024, 1024, 128, true}, DType::bf16);   // Llama-style GQA
  check_against_cpu({1, 4, 4, 512, 512, 64, true}, DType::f16);
  check_against_cpu({1, 4, 4, 512, 512, 64, true}, DType::f32);
}

TEST_F(CudaAttention, ForwardAndKeyGradientsRepeatBitForBit) {
  REQUIRE_GPU();
  // dQ is summed with float atomics (as FlashAttention-2) and may differ in its last bits.
  for (DType dtype : kDtypes) {
    const Config c{2, 4, 2, 190, 190, 64, true, 0.1};
    const Inputs in = random_inputs(c, dtype, 3);
    const Result a = run(c, in, dtype, kGpu), b = run(c, in, dtype, kGpu);
    EXPECT_EQ(a.out, b.out) << dtype_name(dtype);
    EXPECT_EQ(a.grad_k, b.grad_k) << dtype_name(dtype);
    EXPECT_EQ(a.grad_v, b.grad_v) << dtype_name(dtype);
  }
}

// Peak allocated bytes of one forward and backward on `device`, inputs and grad_out excluded.
int64_t step_peak(const Config& c, DType dtype, Device device) {
  const Tensor q = Tensor::zeros({c.b, c.hq, c.tq, c.d}, dtype, device).set_requires_grad(true);
  const Tensor k = Tensor::zeros({c.b, c.hkv, c.tk, c.d}, dtype, device).set_requires_grad(true);
  const Tensor v = Tensor::zeros({c.b, c.hkv, c.tk, c.d}, dtype, device).set_requires_grad(true);
  const Tensor grad = Tensor::ones({c.b, c.hq, c.tq, c.d}, dtype, device);
  const int64_t before = static_cast<int64_t>(memory_allocated(device));
  reset_peak_memory_stats(device);
  {
    const Tensor out = scaled_dot_product_attention(q, k, v, c.causal, {}, c.dropout_p);
    backward(out, grad);
  }
  return static_cast<int64_t>(max_memory_allocated(device)) - before;
}

TEST_F(CudaAttention, AllocatesWhatAMetaDryRunPredicts) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    for (const Config& c :
         {Config{2, 4, 2, 130, 130, 64, true}, Config{1, 2, 2, 33, 70, 200, false, 0.1}}) {
      const int64_t gpu = step_peak(c, dtype, kGpu);
      EXPECT_EQ(step_peak(c, dtype, kMeta), gpu) << name_of(c, dtype);
    }
  }
}

}  // namespace
}  // namespace headroom
