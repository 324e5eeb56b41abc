// checkpoint() and checkpoint_sequential() on small functions: gradients bit for bit equal to a
// plain run, early stop, the determinism check, RNG and autocast restored for the recompute,
// retain_graph, and what a region keeps after its forward.
#include <gtest/gtest.h>

#include <any>

#include <cstring>
#include <functional>
#include <string>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "memory/device_memory.h"
#include "autograd/saved_tensor.h"
#include "memsave/checkpoint.h"
#include "ops/cast.h"
#include "ops/ops.h"

namespace headroom {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return false;
  }
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.nbytes())) == 0;
}

// The message of the ValueError that f throws ("" when it throws none).
std::string value_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

struct Leaves {
  Tensor x, w1, w2;
};

Leaves make_leaves() {
  Generator gen(7);
  return {Tensor::randn({4, 16}, DType::f32, kCPU, &gen).set_requires_grad(true),
          Tensor::randn({32, 16}, DType::f32, kCPU, &gen).set_requires_grad(true),
          Tensor::randn({16, 32}, DType::f32, kCPU, &gen).set_requires_grad(true)};
}

// linear -> dropout -> gelu -> linear: saves the input, both weights, gelu's input and the
// second linear's input; dropout saves nothing but draws from the default generator.
Tensor region(const Leaves& l, const Tensor& x, int* calls = nullptr) {
  if (calls) ++*calls;
  return linear(gelu(dropout(linear(x, l.w1), 0.25)), l.w2);
}

std::vector<Tensor> grads_of(const Leaves& l) { return {l.x.grad(), l.w1.grad(), l.w2.grad()}; }

TEST(Checkpoint, GradientsEqualAPlainRunBitForBit) {
  const Leaves plain = make_leaves();
  manual_seed(11);
  backward(sum(region(plain, plain.x)));
  const Leaves ckpt = make_leaves();
  manual_seed(11);
  int calls = 0;
  const Tensor y = checkpoint([&](const Tensor& x) { return region(ckpt, x, &calls); }, ckpt.x);
  const uint64_t offset_after_forward = default_generator().offset();
  backward(sum(y));
  EXPECT_EQ(calls, 2);  // forward and one recompute
  // The recompute draws the forward's dropout mask and leaves the generator where it was.
  EXPECT_EQ(default_generator().offset(), offset_after_forward);
  EXPECT_EQ(default_generator().seed(), 11u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(grads_of(plain)[i], grads_of(ckpt)[i])) << i;
}

// Hooks around a region (activation offload) keep its inputs: pack at the checkpoint call, unpack
// for the recompute, and the gradients are those of a plain run.
TEST(Checkpoint, HooksAroundTheRegionKeepItsInputs) {
  const Leaves plain = make_leaves();
  manual_seed(11);
  backward(sum(region(plain, plain.x)));
  const Leaves ckpt = make_leaves();
  manual_seed(11);
  int packs = 0, unpacks = 0;
  Tensor y;
  {
    SavedTensorsHooksGuard hooks(
        [&packs](const Tensor& t) -> std::any {
          ++packs;
          return t.clone();  // a copy, as offload's host copy
        },
        [&unpacks](const std::any& packed) -> Tensor {
          ++unpacks;
          return std::any_cast<const Tensor&>(packed);
        });
    y = checkpoint([&](const Tensor& x) { return region(ckpt, x); }, ckpt.x);
  }
  EXPECT_EQ(packs, 1);  // the input; the region's own saves are handles
  backward(sum(y));
  EXPECT_EQ(unpacks, 1);  // the recompute
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(grads_of(plain)[i], grads_of(ckpt)[i])) << i;
}

TEST(Checkpoint, KeepsOnlyTheOutputAfterTheForward) {
  const Leaves l = make_leaves();
  const size_t before = memory_allocated(kCPU);
  const Tensor y = checkpoint([&](const Tensor& x) { return region(l, x); }, l.x);
  // The region's input is the leaf x (kept as is, no copy); of its activations nothing is kept.
  EXPECT_EQ(memory_allocated(kCPU) - before, 512u);  // y: 4 x 16 fp32 = 256 B, one 512 B block
  const size_t plain_before = memory_allocated(kCPU);
  const Tensor z = region(l, l.x);
  // Plain: z, the dropout output (gelu's input) and gelu's output, 4 x 32 fp32 each: 512 B.
  EXPECT_EQ(memory_allocated(kCPU) - plain_before, 512u + 2 * 512u);
}

TEST(Checkpoint, NoGradRunsTheFunctionOnce) {
  const Leaves l = make_leaves();
  int calls = 0;
  NoGradGuard no_grad;
  const Tensor y = checkpoint([&](const Tensor& x) { return region(l, x, &calls); }, l.x);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y.requires_grad());
}

// Stages after which the counters tick: the last save is gelu's in stage 2.
struct Stages {
  int first = 0, second = 0, third = 0;
};

Tensor staged(const Tensor& x, Stages& s) {
  Tensor a = gelu(x);  // saves x
  ++s.first;
  Tensor b = gelu(a);  // saves a: the region's last save
  ++s.second;
  Tensor c = scale(b, 2.0);  // saves nothing
  ++s.third;
  return c;
}

TEST(Checkpoint, EarlyStopEndsTheRecomputeAtTheLastSave) {
  const Leaves l = make_leaves();
  Stages s;
  backward(sum(checkpoint([&](const Tensor& x) { return staged(x, s); }, l.x)));
  // The recompute stops inside the second gelu, right after its save.
  EXPECT_EQ(s.first, 2);
  EXPECT_EQ(s.second, 1);
  EXPECT_EQ(s.third, 1);
}

TEST(Checkpoint, WithoutEarlyStopTheWholeRegionRuns) {
  const Leaves l = make_leaves();
  Stages s;
  CheckpointOptions options;
  options.early_stop = false;
  backward(sum(checkpoint([&](const Tensor& x) { return staged(x, s); }, l.x, options)));
  EXPECT_EQ(s.first, 2);
  EXPECT_EQ(s.second, 2);
  EXPECT_EQ(s.third, 2);
}

TEST(Checkpoint, DeterminismCheckNamesTheTensorAndBothMetadata) {
  const Leaves l = make_leaves();
  int calls = 0;
  // The recompute narrows the input: the tensor gelu saves (index 0) changes shape.
  auto fn = [&](const Tensor& x) {
    const Tensor in = calls++ == 0 ? x : narrow(x, 1, 0, 8);
    return sum(gelu(in));
  };
  const Tensor y = checkpoint(fn, l.x);
  const std::string what = value_error_of([&] { backward(y); });
  EXPECT_NE(what.find("saved tensor 0"), std::string::npos) << what;
  EXPECT_NE(what.find("saved shape [4, 16], f32, cpu"), std::string::npos) << what;
  EXPECT_NE(what.find("recomputed shape [4, 8], f32, cpu"), std::string::npos) << what;
}

TEST(Checkpoint, DeterminismCheckCanBeTurnedOff) {
  const Leaves l = make_leaves();
  int calls = 0;
  auto fn = [&](const Tensor& x) { return sum(gelu(calls++ == 0 ? x : scale(x, 1.0))); };
  CheckpointOptions options;
  options.determinism_check = false;
  EXPECT_NO_THROW(backward(checkpoint(fn, l.x, options)));
}

TEST(Checkpoint, FewerSavesInTheRecomputeIsAnError) {
  const Leaves l = make_leaves();
  int calls = 0;
  auto fn = [&](const Tensor& x) {
    const Tensor y = gelu(x);
    return calls++ == 0 ? gelu(y) : scale(y, 1.0);
  };
  const Tensor y = checkpoint(fn, l.x);
  const std::string what = value_error_of([&] { backward(sum(y)); });
  EXPECT_NE(what.find("the forward saved 2 tensors for backward but the recompute saved 1"),
            std::string::npos)
      << what;
}

TEST(Checkpoint, InputChangedInPlaceIsAnError) {
  const Leaves l = make_leaves();
  Tensor x = l.x.detach().clone().set_requires_grad(true);
  Tensor in = scale(x, 1.0);  // a non-leaf, so that it may be changed in place
  const Tensor y = checkpoint([&](const Tensor& t) { return gelu(t); }, in);
  {
    NoGradGuard no_grad;
    in.detach().add_(Tensor::ones(in.shape()));
  }
  EXPECT_THROW(backward(sum(y)), Error);
}

TEST(Checkpoint, RetainGraphRecomputesForEachBackward) {
  const Leaves plain = make_leaves();
  manual_seed(3);
  const Tensor p = sum(region(plain, plain.x));
  backward(p, Tensor(), /*retain_graph=*/true);
  backward(p);
  const Leaves ckpt = make_leaves();
  manual_seed(3);
  int calls = 0;
  const Tensor c =
      sum(checkpoint([&](const Tensor& x) { return region(ckpt, x, &calls); }, ckpt.x));
  backward(c, Tensor(), /*retain_graph=*/true);
  backward(c);
  EXPECT_EQ(calls, 3);  // the forward and one recompute per backward, as torch's graph task ids
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(grads_of(plain)[i], grads_of(ckpt)[i])) << i;
  // Without retain_graph the saved handles are gone, as for any graph.
  EXPECT_THROW(backward(c), Error);
}

// Two regions under bf16 autocast, the second inside a nested region that turns autocast off.
// Each recompute must see its own forward's state: the determinism check would catch a wrong
// one (a bf16 linear saves bf16 inputs, an fp32 one f32 inputs), and so would the gradients.
TEST(Checkpoint, NestedAutocastStateOfTheForwardIsRestored) {
  auto run = [](bool checkpointed) {
    const Leaves l = make_leaves();
    auto first = [&l](const Tensor& x) { return gelu(linear(x, l.w1)); };  // bf16 linear
    auto second = [&l](const Tensor& h) { return linear(cast(h, DType::f32), l.w2); };
    Tensor y;
    {
      Autocast outer(DeviceType::cpu, DType::bf16);
      const Tensor h = checkpointed ? checkpoint(first, l.x) : first(l.x);
      Autocast inner(DeviceType::cpu, DType::bf16, /*enabled=*/false);
      y = checkpointed ? checkpoint(second, h) : second(h);
      EXPECT_EQ(y.dtype(), DType::f32);
    }
    backward(sum(y));
    EXPECT_FALSE(AutocastMode::get(DeviceType::cpu).enabled);
    EXPECT_EQ(AutocastMode::nesting(), 0);
    return grads_of(l);
  };
  const std::vector<Tensor> plain = run(false), ckpt = run(true);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(plain[i], ckpt[i])) << i;
}

TEST(CheckpointSequential, CheckpointsAllSegmentsButTheLast) {
  const Leaves plain = make_leaves(), ckpt = make_leaves();
  int counts[5] = {};
  auto make = [&counts](const Leaves& l) {
    std::vector<TensorFunction> f;
    f.push_back([&, l](const Tensor& x) {
      ++counts[0];
      return linear(x, l.w1);
    });
    f.push_back([&](const Tensor& x) {
      ++counts[1];
      return gelu(x);
    });
    f.push_back([&](const Tensor& x) {
      ++counts[2];
      return dropout(x, 0.5);
    });
    f.push_back([&, l](const Tensor& x) {
      ++counts[3];
      return linear(x, l.w2);
    });
    f.push_back([&](const Tensor& x) {
      ++counts[4];
      return gelu(x);
    });
    return f;
  };
  manual_seed(5);
  Tensor y = plain.x;
  for (const TensorFunction& f : make(plain)) y = f(y);
  backward(sum(y));
  std::fill(std::begin(counts), std::end(counts), 0);
  manual_seed(5);
  // 5 functions in 2 segments: size 2, so [0, 1] is checkpointed and [2, 4] runs normally.
  backward(sum(checkpoint_sequential(make(ckpt), 2, ckpt.x)));
  EXPECT_EQ(counts[0], 2);
  EXPECT_EQ(counts[1], 2);
  EXPECT_EQ(counts[2], 1);
  EXPECT_EQ(counts[3], 1);
  EXPECT_EQ(counts[4], 1);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(grads_of(plain)[i], grads_of(ckpt)[i])) << i;
}

TEST(CheckpointSequential, RejectsSegmentCountsOutOfRange) {
  const std::vector<TensorFunction> f(3, [](const Tensor& x) { return gelu(x); });
  const Tensor x = Tensor::ones({2, 2});
  EXPECT_THROW(checkpoint_sequential(f, 0, x), ValueError);
  const std::string what = value_error_of([&] { checkpoint_sequential(f, 4, x); });
  EXPECT_NE(what.find("segments 4 must lie in [1, 3]"), std::string::npos) << what;
}

TEST(MustSave, KeepsTheOutputAndSkipsTheOpsWorkInTheRecompute) {
  const Leaves plain = make_leaves(), ckpt = make_leaves();
  manual_seed(2);
  backward(sum(region(plain, plain.x)));
  manual_seed(2);
  int started = 0, finished = 0;
  auto counted = [&](const Tensor& w) {
    return [&, w](const Tensor& in) {
      ++started;
      Tensor out = linear(in, w);  // saves in and w, then runs the GEMM
      ++finished;
      return out;
    };
  };
  auto fn = [&](const Tensor& x) {
    return must_save(counted(ckpt.w2), gelu(dropout(must_save(counted(ckpt.w1), x), 0.25)));
  };
  const size_t before = memory_allocated(kCPU);
  const Tensor y = checkpoint(fn, ckpt.x);
  // The output (4 x 16) and the first linear's kept output (4 x 32); the second's output is
  // not needed by any recompute (the region's last save is its input) and is dropped.
  EXPECT_EQ(memory_allocated(kCPU) - before, 512u + 512u);
  backward(sum(y));
  // The recompute calls both linears to remake their saves and stops each right after them:
  // no GEMM runs a second time.
  EXPECT_EQ(started, 4);
  EXPECT_EQ(finished, 2);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(grads_of(plain)[i], grads_of(ckpt)[i])) << i;
}

TEST(MustSave, OutsideARegionJustRunsTheOp) {
  const Leaves l = make_leaves();
  const Tensor y = must_save([&](const Tensor& x) { return linear(x, l.w1); }, l.x);
  EXPECT_TRUE(same_bits(y, linear(l.x, l.w1)));
}

}  // namespace
}  // namespace headroom
