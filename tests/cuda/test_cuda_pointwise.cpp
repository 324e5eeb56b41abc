// The point-wise ops, reductions, softmax, dropout, rotary and embedding on the GPU against the
// CPU reference: forward and backward through autograd, in f32, bf16 and f16, on odd sizes,
// sizes above one block and a large case; and the GPU run's peak allocation against a meta dry
// run of the same op in the native pattern. Skipped without a GPU.
//
// The CPU runs each op in the same dtype: it widens to fp32, computes and rounds once per op, as
// the GPU does, so the two differ by the accumulation order and CUDA's expf / tanhf against the
// CPU's polynomials, a few ulps of the output's dtype at most. Ops whose results are single IEEE
// operations or ordered fp32 sums on both sides (dropout, the gather and its scatter-add) must
// agree bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "backend/elementwise_kernels.h"
#include "backend/reduction_kernels.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda_test_support.h"
#include "memory/device_memory.h"
#include "ops/op_support.h"
#include "ops/ops.h"

namespace headroom {
namespace {

constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

struct Tolerance {
  double rel;
  double abs;
};

// A few ulps of each dtype; `abs` covers results that cancel to near zero.
Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return {1e-2, 1e-2};
    case DType::f16:
      return {2e-3, 2e-3};
    default:
      return {1e-5, 1e-5};
  }
}

void expect_close(const Tensor& actual, const Tensor& expected, Tolerance tol,
                  const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  ASSERT_EQ(actual.dtype(), expected.dtype()) << what;
  const std::vector<float> a = actual.to_float_vector(), e = expected.to_float_vector();
  // Relative to the tensor's scale, so that sums of many terms are judged by their size.
  double scale = 0.0;
  for (float v : e) scale = std::max(scale, std::abs(static_cast<double>(v)));
  size_t bad = 0;
  const double slack = tol.abs * std::max(scale, 1e-3);
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::abs(static_cast<double>(a[i]) - e[i]);
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    const bool close = diff <= tol.rel * std::abs(static_cast<double>(e[i])) + slack;
    if (!both_nan && !close && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << " on the GPU, " << e[i]
                    << " on the CPU";
    }
  }
  EXPECT_EQ(bad, 0u) << what << " (" << a.size() << " elements)";
}

void expect_bitwise_equal(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  ASSERT_EQ(actual.dtype(), expected.dtype()) << what;
  expect_same_bits(expected.to_float_vector(), actual.to_float_vector(), what);
}

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// One run of an op: its output, its floating inputs' gradients, and the peak bytes allocated
// above what was allocated before it began.
struct Run {
  Tensor out;
  std::vector<Tensor> grads;
  size_t peak = 0;
};

// Runs op on copies of `inputs` moved to `device` (floating ones as leaves that require grad),
// then backward with `grad_out` moved there.
Run run_on(Device device, const Op& op, const std::vector<Tensor>& inputs, const Tensor& grad_out) {
  // An empty cache on both sides: a cached block that a request reuses without splitting (less
  // than 1 MiB over) counts whole, so the earlier cases' blocks would change the GPU's peak.
  if (device != kCPU) empty_cache(device);
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = device.type == DeviceType::meta ? Tensor::empty(t.shape(), t.dtype(), kMeta)
                                                  : t.to(device).detach();
    if (is_floating(t.dtype())) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  const Tensor grad = device.type == DeviceType::meta
                          ? Tensor::empty(grad_out.shape(), grad_out.dtype(), kMeta)
                          : grad_out.to(device);
  Run run;
  const size_t before = memory_allocated(device);
  reset_peak_memory_stats(device);
  run.out = op(leaves);
  backward(run.out, grad);
  run.peak = max_memory_allocated(device) - before;
  for (const Tensor& leaf : leaves) {
    if (leaf.requires_grad()) run.grads.push_back(leaf.grad());
  }
  return run;
}

// The op on the CPU and on the GPU from the same inputs and output gradient: outputs and input
// gradients compared within `tol` (or bit for bit when `exact`), and the GPU's peak allocation
// equal to a meta dry run's in the native pattern.
void check_op(const std::string& what, const Op& op, const std::vector<Tensor>& inputs,
              Tolerance tol, bool exact = false, uint64_t seed = 1) {
  SCOPED_TRACE(what);
  Shape out_shape;
  DType out_dtype = DType::f32;
  Run meta;
  {
    // The output's shape and dtype first, for the output gradient; the probe is freed before the
    // meta run, whose pool it would otherwise split (a live block survives empty_cache).
    std::vector<Tensor> probes;
    for (const Tensor& t : inputs) probes.push_back(Tensor::empty(t.shape(), t.dtype(), kMeta));
    const Tensor probe = op(probes);
    out_shape = probe.shape();
    out_dtype = probe.dtype();
  }
  Generator generator(seed);
  const Tensor grad_out = Tensor::randn(out_shape, DType::f32, kCPU, &generator).to(out_dtype);
  { meta = run_on(kMeta, op, inputs, grad_out); }
  const Run cpu = run_on(kCPU, op, inputs, grad_out);
  const Run gpu = run_on(kGpu, op, inputs, grad_out);
  EXPECT_EQ(gpu.peak, meta.peak) << "GPU peak allocated against the meta dry run";
  EXPECT_EQ(meta.out.dtype(), gpu.out.dtype());
  auto compare = [&](const Tensor& a, const Tensor& e, const std::string& name) {
    if (exact)
      expect_bitwise_equal(a, e, name);
    else
      expect_close(a, e, tol, name);
  };
  compare(gpu.out, cpu.out, what + " forward");
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < gpu.grads.size(); ++i) {
    ASSERT_TRUE(gpu.grads[i].defined() && cpu.grads[i].defined());
    EXPECT_EQ(gpu.grads[i].dtype(), meta.grads[i].dtype());
    compare(gpu.grads[i], cpu.grads[i], what + " grad " + std::to_string(i));
  }
}

// Normal values times `spread`, rounded to dtype.
Tensor random(const Shape& shape, DType dtype, uint64_t seed, double spread = 1.0) {
  Generator generator(seed);
  return scale(Tensor::randn(shape, DType::f32, kCPU, &generator), spread).to(dtype);
}

// The sizes every point-wise op runs at: one element, odd, above one block, and large.
const std::vector<Shape> kPointwiseShapes = {Shape{1}, Shape{7, 333}, Shape{4097},
                                             Shape{(1 << 20) + 5}};

std::string name_of(const char* op, DType dtype, const Shape& shape) {
  std::ostringstream s;
  s << op << " " << dtype_name(dtype) << " " << shape;
  return s.str();
}

TEST(CudaPointwise, ActivationsMatchTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kPointwiseShapes) {
      const Tensor x = random(shape, dtype, 11, 3.0);
      check_op(
          name_of("gelu", dtype, shape), [](auto& in) { return gelu(in[0]); }, {x},
          tolerance_for(dtype));
      check_op(
          name_of("silu", dtype, shape), [](auto& in) { return silu(in[0]); }, {x},
          tolerance_for(dtype));
      const Tensor up = random(shape, dtype, 12);
      check_op(
          name_of("swiglu", dtype, shape), [](auto& in) { return swiglu(in[0], in[1]); }, {x, up},
          tolerance_for(dtype));
    }
  }
}

TEST(CudaPointwise, ActivationTailsMatchTheCpu) {
  REQUIRE_GPU();
  // Saturated tails, zero and signed zero, through every branch of the CPU's tanh and exp.
  const Tensor x = Tensor::from_floats({-100.0f, -88.5f, -20.0f, -9.5f, -0.7f, -0.3f, -0.0f, 0.0f,
                                        1e-30f, 0.3f, 0.7f, 9.5f, 20.0f, 88.5f, 100.0f},
                                       {15});
  check_op(
      "gelu tails", [](auto& in) { return gelu(in[0]); }, {x}, tolerance_for(DType::f32));
  check_op(
      "silu tails", [](auto& in) { return silu(in[0]); }, {x}, tolerance_for(DType::f32));
}

TEST(CudaPointwise, BinaryOpsWithBroadcastingMatchTheCpu) {
  REQUIRE_GPU();
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Binary> ops[] = {{"add", add}, {"sub", sub}, {"mul", mul}};
  for (DType dtype : kDtypes) {
    for (const auto& [name, op] : ops) {
      const Op run = [op = op](auto& in) { return op(in[0], in[1]); };
      for (const Shape& shape : kPointwiseShapes) {
        check_op(name_of(name, dtype, shape), run,
                 {random(shape, dtype, 21), random(shape, dtype, 22)}, tolerance_for(dtype));
      }
      // Broadcast both ways; the gradients are sums over the broadcast dimensions.
      check_op(name_of(name, dtype, Shape{33, 1, 65}), run,
               {random(Shape{33, 1, 65}, dtype, 23), random(Shape{17, 1}, dtype, 24)},
               tolerance_for(dtype));
      check_op(name_of(name, dtype, Shape{300, 2049}), run,
               {random(Shape{300, 2049}, dtype, 25), random(Shape{2049}, dtype, 26)},
               tolerance_for(dtype));
      // A transposed operand: the strided path without broadcasting.
      const Op transposed = [op = op](auto& in) { return op(transpose(in[0], 0, 1), in[1]); };
      check_op(name_of(name, dtype, Shape{129, 70}) + " transposed", transposed,
               {random(Shape{70, 129}, dtype, 27), random(Shape{129, 70}, dtype, 28)},
               tolerance_for(dtype));
    }
  }
  // Mixed dtypes compute in f32.
  check_op(
      "add bf16 + f32", [](auto& in) { return add(in[0], in[1]); },
      {random(Shape{5, 300}, DType::bf16, 29), random(Shape{300}, DType::f32, 30)},
      tolerance_for(DType::f32));
  check_op(
      "mul f16 * bf16", [](auto& in) { return mul(in[0], in[1]); },
      {random(Shape{1000}, DType::f16, 31), random(Shape{1000}, DType::bf16, 32)},
      tolerance_for(DType::f32));
}

TEST(CudaPointwise, ScaleMatchesTheCpuBitForBit) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kPointwiseShapes) {
      check_op(
          name_of("scale", dtype, shape), [](auto& in) { return scale(in[0], -0.37); },
          {random(shape, dtype, 41)}, tolerance_for(dtype), /*exact=*/true);
    }
  }
}

// One list launch casts tensors of several sizes (an empty one among them) between f32, bf16
// and f16, rounding as the CPU's copy does: bit for bit. The values span f16's overflow.
TEST(CudaPointwise, CastListMatchesTheCpuBitForBit) {
  REQUIRE_GPU();
  const std::vector<Shape> shapes = {Shape{1}, Shape{0}, Shape{7, 333}, Shape{(1 << 20) + 5}};
  for (DType from : kDtypes) {
    for (DType to : kDtypes) {
      if (from == to) continue;
      std::vector<Tensor> cpu_src, cpu_dst, gpu_src, gpu_dst;
      uint64_t seed = 51;
      for (const Shape& shape : shapes) {
        cpu_src.push_back(random(shape, from, seed++, 3e4));
        cpu_dst.push_back(Tensor::empty(shape, to));
        gpu_src.push_back(cpu_src.back().to(kGpu));
        gpu_dst.push_back(Tensor::empty(shape, to, kGpu));
      }
      need_kernel("test", kCPU, &ElementwiseKernels::cast_list)(cpu_src, cpu_dst);
      need_kernel("test", kGpu, &ElementwiseKernels::cast_list)(gpu_src, gpu_dst);
      for (size_t i = 0; i < shapes.size(); ++i) {
        EXPECT_EQ(gpu_dst[i].to(kCPU).to_float_vector(), cpu_dst[i].to_float_vector())
            << dtype_name(from) << " -> " << dtype_name(to) << " " << shapes[i];
        EXPECT_EQ(cpu_dst[i].to_float_vector(), cpu_src[i].to(to).to_float_vector());
      }
    }
  }
}

TEST(CudaPointwise, FullReductionsMatchTheCpu) {
  REQUIRE_GPU();
  using Reduce = Tensor (*)(const Tensor&);
  const std::pair<const char*, Reduce> ops[] = {{"sum", static_cast<Reduce>(sum)},
                                                {"mean", static_cast<Reduce>(mean)}};
  // One block up to kSumAllOneBlock elements, two passes above.
  const std::vector<Shape> shapes = {Shape{1}, Shape{1000}, Shape{kSumAllOneBlock},
                                     Shape{kSumAllOneBlock + 1}, Shape{3, 1 << 20}};
  for (DType dtype : kDtypes) {
    for (const auto& [name, op] : ops) {
      for (const Shape& shape : shapes) {
        check_op(
            name_of(name, dtype, shape), [op = op](auto& in) { return op(in[0]); },
            {random(shape, dtype, 51)}, tolerance_for(dtype));
      }
    }
  }
}

TEST(CudaPointwise, FullReductionsRepeatBitForBit) {
  REQUIRE_GPU();
  const Tensor x = random(Shape{5, 1 << 20}, DType::f32, 52).to(kGpu);
  const Tensor first = sum(x);
  for (int i = 0; i < 3; ++i) expect_bitwise_equal(sum(x), first, "sum again");
  const Tensor rows = random(Shape{3000, 4001}, DType::bf16, 53).to(kGpu);
  expect_bitwise_equal(sum(rows, 0), sum(rows, 0), "sum over dim 0 again");
  expect_bitwise_equal(sum(rows, 1), sum(rows, 1), "sum over dim 1 again");
}

TEST(CudaPointwise, DimReductionsMatchTheCpu) {
  REQUIRE_GPU();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{Shape{8, 50, 30}, 0},     {Shape{8, 50, 30}, 1}, {Shape{8, 50, 30}, 2},
                        {Shape{1000, 3001}, 1},    {Shape{5000, 7}, 0},   {Shape{3, 70000}, 1},
                        {Shape{16, 1024, 768}, 0}, {Shape{17}, 0}};
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      const Tensor x = random(c.shape, dtype, 61);
      const int64_t dim = c.dim;
      check_op(
          name_of("sum dim", dtype, c.shape) + " " + std::to_string(dim),
          [dim](auto& in) { return sum(in[0], dim, false); }, {x}, tolerance_for(dtype));
      check_op(
          name_of("mean dim", dtype, c.shape) + " " + std::to_string(dim),
          [dim](auto& in) { return mean(in[0], dim, true); }, {x}, tolerance_for(dtype));
    }
  }
}

TEST(CudaPointwise, SoftmaxMatchesTheCpu) {
  REQUIRE_GPU();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{Shape{13, 1}, 1},        {Shape{3, 2}, 0},     {Shape{8, 1000}, -1},
                        {Shape{4, 129, 5}, 1},    {Shape{2, 3, 77}, 1}, {Shape{37, 50304}, 1},
                        {Shape{64, 12, 255}, -1}, {Shape{300, 33}, 0}};
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      const int64_t dim = c.dim;
      check_op(
          name_of("softmax", dtype, c.shape) + " dim " + std::to_string(dim),
          [dim](auto& in) { return softmax(in[0], dim); }, {random(c.shape, dtype, 71, 4.0)},
          tolerance_for(dtype));
    }
  }
}

TEST(CudaPointwise, DropoutMaskIsTheCpusBitForBit) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kPointwiseShapes) {
      for (double p : {0.1, 0.5, 1.0}) {
        // A fresh generator per run: the same (seed, offset) on every device.
        const Op op = [p](auto& in) {
          Generator generator(81);
          return dropout(in[0], p, true, &generator);
        };
        check_op(name_of("dropout", dtype, shape) + " p " + std::to_string(p), op,
                 {random(shape, dtype, 82)}, tolerance_for(dtype), /*exact=*/true);
      }
    }
  }
}

TEST(CudaPointwise, DropoutAddIsTheCpusBitForBit) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kPointwiseShapes) {
      for (double p : {0.1, 0.5}) {
        const Op op = [p](auto& in) {
          Generator generator(83);
          return dropout_add(in[0], in[1], p, true, &generator);
        };
        // The residual in f32 (autocast's stream) and in the branch's dtype (pure bf16). Bit for
        // bit (the tolerance is unused): the same mask and the same two roundings as the CPU.
        for (DType residual_dtype : {DType::f32, dtype}) {
          check_op(name_of("dropout_add", dtype, shape) + " residual " +
                       dtype_name(residual_dtype) + " p " + std::to_string(p),
                   op, {random(shape, residual_dtype, 84), random(shape, dtype, 85)},
                   tolerance_for(dtype), /*exact=*/true);
        }
      }
    }
  }
}

TEST(CudaPointwise, RotaryMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : kDtypes) {
    for (double theta : {10000.0, 500000.0}) {
      for (int64_t offset : {0, 1000}) {
        const Op contiguous = [theta, offset](auto& in) {
          return rotary_embedding(in[0], theta, offset);
        };
        check_op(name_of("rotary", dtype, Shape{2, 3, 17, 64}), contiguous,
                 {random(Shape{2, 3, 17, 64}, dtype, 91)}, tolerance_for(dtype));
        // [B, T, H, D] seen as [B, H, T, D], a long sequence and an odd half (D = 2 * 27).
        const Op strided = [theta, offset](auto& in) {
          return rotary_embedding(transpose(in[0], 1, 2), theta, offset);
        };
        check_op(name_of("rotary strided", dtype, Shape{2, 1030, 5, 54}), strided,
                 {random(Shape{2, 1030, 5, 54}, dtype, 92)}, tolerance_for(dtype));
        check_op(name_of("rotary large", dtype, Shape{4, 12, 1024, 128}), contiguous,
                 {random(Shape{4, 12, 1024, 128}, dtype, 93)}, tolerance_for(dtype));
      }
    }
    // Llama 3.1's scaled frequencies (backend/rope_parameters.h), computed the same on both.
    const RopeParameters llama31{.theta = 500000.0,
                                 .scaling = {.type = RopeScaling::Type::llama3,
                                             .factor = 8.0,
                                             .low_freq_factor = 1.0,
                                             .high_freq_factor = 4.0,
                                             .original_max_position_embeddings = 8192}};
    const Op scaled = [&llama31](auto& in) { return rotary_embedding(in[0], llama31, 70000); };
    check_op(name_of("rotary llama3", dtype, Shape{1, 4, 300, 128}), scaled,
             {random(Shape{1, 4, 300, 128}, dtype, 94)}, tolerance_for(dtype));
    // yarn (Qwen2.5's 4x over 32768) and longrope (Phi-3-mini-128k's shape, its long factors
    // past 4096 positions and its short ones within), computed the same on both. The dtype's few
    // ulps, as for the standard tables: the GPU rounds pow, cos and sin once from double where
    // glibc's powf / cosf / sinf may land an ulp away, and the rotated values carry that ulp.
    RopeParameters yarn;
    yarn.theta = 1e6;
    yarn.scaling.type = RopeScaling::Type::yarn;
    yarn.scaling.factor = 4.0;
    yarn.scaling.original_max_position_embeddings = 32768;
    yarn.scaling.attention_factor = 1.1386294361119891;
    const Op yarn_op = [&yarn](auto& in) { return rotary_embedding(in[0], yarn, 40000); };
    check_op(name_of("rotary yarn", dtype, Shape{1, 4, 300, 128}), yarn_op,
             {random(Shape{1, 4, 300, 128}, dtype, 95)}, tolerance_for(dtype));
    RopeParameters longrope;
    longrope.scaling.type = RopeScaling::Type::longrope;
    longrope.scaling.original_max_position_embeddings = 4096;
    longrope.scaling.attention_factor = 1.1902380714238083;
    longrope.scaling.factor_count = 48;
    for (int i = 0; i < 48; ++i) {
      longrope.scaling.short_factor[i] = 1.0f + 0.002f * static_cast<float>(i);
      longrope.scaling.long_factor[i] = 1.0f + 1.2f * static_cast<float>(i);
    }
    for (const int64_t offset : {0, 4000}) {
      const Op longrope_op = [&longrope, offset](auto& in) {
        return rotary_embedding(in[0], longrope, offset);
      };
      check_op(name_of(offset > 0 ? "rotary longrope long" : "rotary longrope short", dtype,
                       Shape{1, 4, 300, 96}),
               longrope_op, {random(Shape{1, 4, 300, 96}, dtype, 96)}, tolerance_for(dtype));
    }
  }
}

Tensor random_ids(const Shape& shape, int64_t num_embeddings, DType dtype, uint64_t seed) {
  Generator generator(seed);
  const std::vector<float> u = Tensor::rand(shape, DType::f32, kCPU, &generator).to_float_vector();
  std::vector<int64_t> ids;
  // Half the ids from a handful of rows, so that rows repeat within and across tiles.
  for (size_t i = 0; i < u.size(); ++i) {
    const double range = i % 2 ? 5.0 : static_cast<double>(num_embeddings);
    ids.push_back(static_cast<int64_t>(u[i] * range));
  }
  return Tensor::from_ints(ids, shape, dtype);
}

TEST(CudaPointwise, EmbeddingMatchesTheCpuBitForBit) {
  REQUIRE_GPU();
  struct Case {
    int64_t num_embeddings, dim;
    Shape ids;
  };
  const Case cases[] = {{50, 24, Shape{4, 7}},
                        {7, 1, Shape{300}},
                        {3000, 33, Shape{2, 513}},
                        {50304, 64, Shape{16, 512}},
                        {1025, 768, Shape{4, 300}}};
  for (DType dtype : kDtypes) {
    for (DType id_dtype : {DType::i32, DType::i64}) {
      for (const Case& c : cases) {
        const Tensor weight = random(Shape{c.num_embeddings, c.dim}, dtype, 101);
        const Tensor ids = random_ids(c.ids, c.num_embeddings, id_dtype, 102);
        check_op(
            name_of("embedding", dtype, Shape{c.num_embeddings, c.dim}) + " ids " +
                dtype_name(id_dtype),
            [](auto& in) { return embedding(in[0], in[1]); }, {weight, ids}, tolerance_for(dtype),
            /*exact=*/true);
      }
    }
  }
}

TEST(CudaPointwise, EmbeddingRejectsABadIdOnTheGpu) {
  REQUIRE_GPU();
  const Tensor weight = Tensor::zeros({10, 4}, DType::bf16, kGpu);
  const Tensor ids = Tensor::from_ints({1, 2, 3, 9, 12, 4, -1}, {7}, DType::i32, kGpu);
  try {
    embedding(weight, ids.reshape({1, 7}));
    FAIL() << "expected an IndexError";
  } catch (const IndexError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("id 12 at ids[0, 4] is out of range for 10 embeddings"), std::string::npos)
        << msg;
  }
  EXPECT_NO_THROW(embedding(weight, Tensor::from_ints({0, 9}, {2}, DType::i64, kGpu)));
}

}  // namespace
}  // namespace headroom
