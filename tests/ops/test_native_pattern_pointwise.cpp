// The native allocation pattern of the point-wise ops, reductions, softmax, dropout, rotary and
// embedding (one code path, Note [Kernel tables]): on the meta device standing in for CUDA, each
// forward and backward allocates its outputs in the inputs' dtype and nothing else, no fp32
// copies, so a dry run predicts the GPU's allocations to the byte. Peaks are counted in the meta
// allocator's 512-byte blocks.
#include <gtest/gtest.h>

#include <functional>

#include "autograd/engine.h"
#include "backend/elementwise_kernels.h"
#include "backend/reduction_kernels.h"
#include "memory/device_memory.h"
#include "ops/device_peak.h"
#include "ops/op_support.h"
#include "ops/ops.h"

namespace headroom {
namespace {

size_t blocks_of(size_t bytes) { return (bytes + 511) / 512 * 512; }

size_t bytes_of(const Shape& shape, DType dtype) {
  return static_cast<size_t>(shape.numel()) * dtype_size(dtype);
}

// Peak bytes allocated on the meta device while fn runs, above what was allocated before.
size_t meta_peak(const std::function<void()>& fn) {
  const size_t before = memory_allocated(kMeta);
  reset_peak_memory_stats(kMeta);
  fn();
  return max_memory_allocated(kMeta) - before;
}

Tensor meta_leaf(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, kMeta);
  t.set_requires_grad(true);
  return t;
}

// The forward's peak, then the backward's (with an output gradient in the output's dtype), and
// the dtypes of the output and of every input's gradient.
struct Pattern {
  DType out_dtype;
  size_t forward_peak = 0;
  size_t backward_peak = 0;
  std::vector<DType> grad_dtypes;
};

Pattern run_pattern(const std::vector<Tensor>& inputs,
                    const std::function<Tensor(const std::vector<Tensor>&)>& op) {
  Pattern p;
  Tensor out;
  p.forward_peak = meta_peak([&] { out = op(inputs); });
  p.out_dtype = out.dtype();
  const Tensor grad = Tensor::empty(out.shape(), out.dtype(), kMeta);
  p.backward_peak = meta_peak([&] { backward(out, grad); });
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) p.grad_dtypes.push_back(t.grad().dtype());
  }
  return p;
}

constexpr DType kLowPrecision[] = {DType::bf16, DType::f16};

TEST(NativePatternPointwise, ActivationsAllocateOnlyTheirOutputs) {
  const Shape shape{7, 333};
  for (DType dtype : kLowPrecision) {
    const size_t one = blocks_of(bytes_of(shape, dtype));
    for (auto op : {gelu, silu}) {
      const Pattern p = run_pattern({meta_leaf(shape, dtype)}, [&](auto& in) { return op(in[0]); });
      EXPECT_EQ(p.out_dtype, dtype);
      EXPECT_EQ(p.forward_peak, one);
      EXPECT_EQ(p.backward_peak, one);
      EXPECT_EQ(p.grad_dtypes, std::vector<DType>{dtype});
    }
    const Pattern p = run_pattern({meta_leaf(shape, dtype), meta_leaf(shape, dtype)},
                                  [](auto& in) { return swiglu(in[0], in[1]); });
    EXPECT_EQ(p.out_dtype, dtype);
    EXPECT_EQ(p.forward_peak, one);
    EXPECT_EQ(p.backward_peak, 2 * one);
    EXPECT_EQ(p.grad_dtypes, (std::vector<DType>{dtype, dtype}));
  }
}

// One code path: a real CPU run of each activation, softmax and dropout, forward and backward,
// allocates exactly what the meta dry run plans, whichever device the dry run stands in for.
TEST(SinglePatternPointwise, ACpuRunAllocatesWhatEveryDryRunPlans) {
  const Shape shape{7, 333};
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const char* name : {"gelu", "silu", "swiglu", "softmax", "softmax0", "dropout"}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + name);
      auto peaks = [&](Device device) {
        Tensor a = Tensor::ones(shape, dtype, device);
        Tensor b = Tensor::ones(shape, dtype, device);
        a.set_requires_grad(true);
        b.set_requires_grad(true);
        const std::string op = name;
        Tensor out;
        const int64_t forward = peak_growth_on(device, [&] {
          out = op == "gelu"      ? gelu(a)
                : op == "silu"    ? silu(a)
                : op == "swiglu"  ? swiglu(a, b)
                : op == "softmax" ? softmax(a, -1)
                : op == "dropout" ? dropout(a, 0.25, true)
                                  : softmax(a, 0);
        });
        const Tensor grad = Tensor::ones(shape, dtype, device);
        const int64_t backward_peak = peak_growth_on(device, [&] { backward(out, grad); });
        return std::pair{forward, backward_peak};
      };
      expect_cpu_run_as_planned(peaks);
    }
  }
}

TEST(SinglePatternPointwise, RotaryOnTheCpuAllocatesWhatEveryDryRunPlans) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool strided : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (strided ? " strided" : " contiguous"));
      auto peaks = [&](Device device) {
        // strided: [B, T, H, D] storage read as [B, H, T, D], as attention hands it over.
        Tensor in = strided ? Tensor::ones({2, 5, 3, 8}, dtype, device).transpose(1, 2)
                            : Tensor::ones({2, 3, 5, 8}, dtype, device);
        in.set_requires_grad(true);
        Tensor out;
        const int64_t forward =
            peak_growth_on(device, [&] { out = rotary_embedding(in, 10000.0); });
        const Tensor grad = Tensor::ones(out.shape(), dtype, device);
        const int64_t backward_peak = peak_growth_on(device, [&] { backward(out, grad); });
        return std::pair{forward, backward_peak};
      };
      expect_cpu_run_as_planned(peaks);
    }
  }
}

TEST(NativePatternPointwise, BinaryOpsReadBroadcastOperandsInPlace) {
  const Shape a_shape{64, 1, 100}, b_shape{9, 1}, out_shape{64, 9, 100};
  for (DType dtype : kLowPrecision) {
    for (auto op : {add, sub, mul}) {
      const Pattern p = run_pattern({meta_leaf(a_shape, dtype), meta_leaf(b_shape, dtype)},
                                    [&](auto& in) { return op(in[0], in[1]); });
      EXPECT_EQ(p.out_dtype, dtype);
      EXPECT_EQ(p.forward_peak, blocks_of(bytes_of(out_shape, dtype)));
      EXPECT_EQ(p.grad_dtypes, (std::vector<DType>{dtype, dtype}));
    }
    const Pattern p =
        run_pattern({meta_leaf(a_shape, dtype)}, [](auto& in) { return scale(in[0], 0.5); });
    EXPECT_EQ(p.out_dtype, dtype);
    EXPECT_EQ(p.forward_peak, blocks_of(bytes_of(a_shape, dtype)));
    EXPECT_EQ(p.backward_peak, blocks_of(bytes_of(a_shape, dtype)));
  }
  // Mixed dtypes compute in f32, as on the CPU.
  const Pattern mixed =
      run_pattern({meta_leaf(a_shape, DType::bf16), meta_leaf(b_shape, DType::f32)},
                  [](auto& in) { return add(in[0], in[1]); });
  EXPECT_EQ(mixed.out_dtype, DType::f32);
  EXPECT_EQ(mixed.forward_peak, blocks_of(bytes_of(out_shape, DType::f32)));
}

TEST(NativePatternPointwise, FullReductionsAllocateTheirPartialSumsOnlyWhenLarge) {
  for (DType dtype : kLowPrecision) {
    for (auto op : {static_cast<Tensor (*)(const Tensor&)>(sum),
                    static_cast<Tensor (*)(const Tensor&)>(mean)}) {
      const Shape small{kSumAllOneBlock};
      const Pattern p = run_pattern({meta_leaf(small, dtype)}, [&](auto& in) { return op(in[0]); });
      EXPECT_EQ(p.out_dtype, dtype);
      EXPECT_EQ(p.forward_peak, 512u);
      // The backward fills x's gradient from the 0-d gradient on the device: nothing else.
      EXPECT_EQ(p.backward_peak, blocks_of(bytes_of(small, dtype)));
      EXPECT_EQ(p.grad_dtypes, std::vector<DType>{dtype});
      const Shape large{3, kSumAllOneBlock / 2 + 1};
      const Pattern q = run_pattern({meta_leaf(large, dtype)}, [&](auto& in) { return op(in[0]); });
      EXPECT_EQ(q.forward_peak, 512u + blocks_of(kSumAllPartials * 8));
    }
  }
}

TEST(NativePatternPointwise, DimReductionsAllocateTheirResult) {
  const Shape shape{8, 50, 30};
  for (DType dtype : kLowPrecision) {
    for (int64_t dim : {0, 1, 2}) {
      std::vector<int64_t> dims = shape.to_vector();
      dims.erase(dims.begin() + dim);
      const Pattern p =
          run_pattern({meta_leaf(shape, dtype)}, [&](auto& in) { return sum(in[0], dim, false); });
      EXPECT_EQ(p.out_dtype, dtype);
      EXPECT_EQ(p.forward_peak, blocks_of(bytes_of(Shape(dims), dtype)));
      EXPECT_EQ(p.grad_dtypes, std::vector<DType>{dtype});
      const Pattern q =
          run_pattern({meta_leaf(shape, dtype)}, [&](auto& in) { return mean(in[0], dim, true); });
      EXPECT_EQ(q.out_dtype, dtype);
      EXPECT_EQ(q.forward_peak, blocks_of(bytes_of(Shape(dims), dtype)));
    }
  }
}

TEST(NativePatternPointwise, SoftmaxDropoutAndRotaryAllocateOnlyTheirOutputs) {
  for (DType dtype : kLowPrecision) {
    const Shape shape{4, 129, 5};
    const size_t one = blocks_of(bytes_of(shape, dtype));
    for (int64_t dim : {1, -1}) {
      const Pattern p =
          run_pattern({meta_leaf(shape, dtype)}, [&](auto& in) { return softmax(in[0], dim); });
      EXPECT_EQ(p.out_dtype, dtype);
      EXPECT_EQ(p.forward_peak, one);
      EXPECT_EQ(p.backward_peak, one);
      EXPECT_EQ(p.grad_dtypes, std::vector<DType>{dtype});
    }
    Generator generator(3);
    const Pattern d = run_pattern({meta_leaf(shape, dtype)},
                                  [&](auto& in) { return dropout(in[0], 0.25, true, &generator); });
    EXPECT_EQ(d.out_dtype, dtype);
    EXPECT_EQ(d.forward_peak, one);
    EXPECT_EQ(d.backward_peak, one);
    EXPECT_EQ(d.grad_dtypes, std::vector<DType>{dtype});
    // A leaf [B, T, H, D] seen as [B, H, T, D]: the kernel reads the strides, nothing is copied,
    // and the cos / sin table lives in the kernel.
    const Shape rotary_shape{2, 3, 17, 64};
    const size_t rotary_out = blocks_of(bytes_of(rotary_shape, dtype));
    Tensor strided = Tensor::empty(Shape{2, 17, 3, 64}, dtype, kMeta).transpose(1, 2);
    strided.set_requires_grad(true);
    const Pattern r =
        run_pattern({strided}, [](auto& in) { return rotary_embedding(in[0], 10000.0, 5); });
    EXPECT_EQ(r.out_dtype, dtype);
    EXPECT_EQ(r.forward_peak, rotary_out);
    EXPECT_EQ(r.backward_peak, rotary_out);
    EXPECT_EQ(r.grad_dtypes, std::vector<DType>{dtype});
  }
}

TEST(NativePatternPointwise, EmbeddingGathersInTheTableDtypeAndScattersIntoF32) {
  const Tensor ids = Tensor::empty(Shape{4, 7}, DType::i64, kMeta);
  for (DType dtype : kLowPrecision) {
    const Tensor weight = meta_leaf(Shape{50, 24}, dtype);
    Tensor out;
    EXPECT_EQ(meta_peak([&] { out = embedding(weight, ids); }),
              blocks_of(bytes_of(Shape{4, 7, 24}, dtype)));
    EXPECT_EQ(out.dtype(), dtype);
    const Tensor grad = Tensor::empty(out.shape(), dtype, kMeta);
    // The f32 gradient the entry scatters into, then its rounding to the weight's dtype by the
    // autograd node (the contract's gradient is f32, as on the CPU).
    EXPECT_EQ(
        meta_peak([&] { backward(out, grad); }),
        blocks_of(bytes_of(Shape{50, 24}, DType::f32)) + blocks_of(bytes_of(Shape{50, 24}, dtype)));
    EXPECT_EQ(weight.grad().dtype(), dtype);
  }
}

}  // namespace
}  // namespace headroom
