// layer_norm, rms_norm, cross_entropy and linear_cross_entropy on the GPU against the CPU
// reference (f32, on the same values rounded to the GPU run's dtype), forward and backward, in
// f32 / bf16 / f16; run-to-run determinism; and the GPU's peak allocated bytes against a meta dry
// run in the native pattern. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "autograd/engine.h"
#include "backend/backend.h"
#include "backend/gemm_kernels.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/tensor.h"
#include "cuda/cuda_test_support.h"
#include "memory/device_memory.h"
#include "ops/op_support.h"
#include "ops/ops.h"

namespace headroom {
namespace {

// Relative tolerance of a result rounded once to `dtype` (also applied to the largest
// reference magnitude, for elements that cancel to near zero).
double tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1e-2;
    case DType::f16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

// |actual - expected| <= rtol * (|expected| + max |expected|) + floor, element by element, by
// cuda_test_support.h's comparison (NaN matches NaN: a loss whose every target is ignored is NaN
// on both, as in PyTorch).
void expect_close(const Tensor& actual, const Tensor& expected, double rtol,
                  const std::string& what, double floor = 0.0) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_TRUE(expected.defined()) << what;
  headroom::expect_close(actual, expected, Tolerance{rtol, rtol, floor}, what);
}

// Normal values * scale + shift, rounded to dtype (on the CPU).
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, float scale = 1.0f,
                     float shift = 0.0f) {
  Generator g(seed);
  std::vector<float> v = Tensor::randn(shape, DType::f32, kCPU, &g).to_float_vector();
  for (float& e : v) e = e * scale + shift;
  return Tensor::from_floats(v, shape).to(dtype);
}

// Targets in [0, vocab), about one in ten equal to ignore_index -100.
Tensor random_targets(int64_t rows, int64_t vocab, DType dtype, uint64_t seed) {
  std::vector<int64_t> ids;
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t r = 0; r < rows; ++r) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t draw = state >> 33;
    ids.push_back(draw % 10 == 0 ? -100 : static_cast<int64_t>((draw / 10) % vocab));
  }
  return Tensor::from_ints(ids, {rows}, dtype);
}

// A leaf on `device` in `dtype` holding `value`'s numbers (undefined stays undefined).
Tensor leaf(const Tensor& value, DType dtype, Device device, bool requires_grad = true) {
  if (!value.defined()) return Tensor();
  Tensor t = value.to(dtype).to(device);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

// ---- layer_norm / rms_norm

struct NormRun {
  Tensor out, dx, dweight, dbias;
};

struct NormCase {
  bool centred;
  int64_t rows, dim;
  DType dtype;         // of x on the GPU
  DType weight_dtype;  // of weight and bias on the GPU
  bool affine;
};

std::string name_of(const NormCase& c) {
  return str_cat(c.centred ? "layer_norm" : "rms_norm", " [", c.rows, ", ", c.dim, "] ",
                 dtype_name(c.dtype), " weight ", dtype_name(c.weight_dtype),
                 c.affine ? "" : " (no affine)");
}

NormRun run_norm(const NormCase& c, Device device, bool reference) {
  const DType dtype = reference ? DType::f32 : c.dtype;
  const DType wdtype = reference ? DType::f32 : c.weight_dtype;
  const Tensor x = leaf(random_tensor({c.rows, c.dim}, c.dtype, 1, 2.0f, 0.5f), dtype, device);
  const Tensor w = c.affine
                       ? leaf(random_tensor({c.dim}, c.weight_dtype, 2, 0.5f, 1.0f), wdtype, device)
                       : Tensor();
  const Tensor b = c.affine && c.centred
                       ? leaf(random_tensor({c.dim}, c.weight_dtype, 3, 0.2f), wdtype, device)
                       : Tensor();
  const Tensor dy = random_tensor({c.rows, c.dim}, c.dtype, 4).to(dtype).to(device);
  Tensor out = c.centred ? layer_norm(x, w, b) : rms_norm(x, w);
  backward(out, dy);
  return {out.detach(), x.grad(), w.defined() ? w.grad() : Tensor(),
          b.defined() ? b.grad() : Tensor()};
}

void check_norm(const NormCase& c) {
  const NormRun ref = run_norm(c, kCPU, true);
  const NormRun got = run_norm(c, kGpu, false);
  const std::string what = name_of(c);
  EXPECT_EQ(got.out.dtype(), c.dtype) << what;
  EXPECT_EQ(got.dx.dtype(), c.dtype) << what;
  const double tol = tolerance_of(c.dtype);
  expect_close(got.out, ref.out, tol, what + " out");
  // A one-element row's RMSNorm dx is w g eps / (x^2 + eps)^1.5: terms of order |w g| / rms
  // (about 1 here) that cancel to ~1e-7, so both devices hold rounding noise of order 2^-24.
  const double dx_floor = !c.centred && c.dim == 1 ? 1e-6 : 0.0;
  expect_close(got.dx, ref.dx, tol, what + " dx", dx_floor);
  if (c.affine) {
    EXPECT_EQ(got.dweight.dtype(), c.weight_dtype) << what;
    const double wtol = std::max(tol, tolerance_of(c.weight_dtype));
    expect_close(got.dweight, ref.dweight, wtol, what + " dweight");
    if (c.centred) expect_close(got.dbias, ref.dbias, wtol, what + " dbias");
  }
}

TEST(CudaNorm, LayerNormMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    // Odd sizes (scalar path), packed sizes, one row, rows above one backward block, a dim whose
    // partial sums do not fit in shared memory, and a large case.
    for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 1},
                             {7, 33},
                             {3, 64},
                             {300, 768},
                             {37, 6144},
                             {4099, 1024}}) {
      check_norm({true, rows, dim, dtype, dtype, true});
    }
    check_norm({true, 129, 96, dtype, dtype, false});
  }
  // Mixed: bf16 x with an f32 weight and bias.
  check_norm({true, 65, 256, DType::bf16, DType::f32, true});
}

TEST(CudaNorm, RmsNormMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (auto [rows, dim] :
         {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {300, 768}, {37, 6144}, {4099, 1024}}) {
      check_norm({false, rows, dim, dtype, dtype, true});
    }
    check_norm({false, 17, 40, dtype, dtype, false});
  }
  check_norm({false, 65, 256, DType::f16, DType::f32, true});
}

// A norm of f32 x written in bf16 / f16 (ops/norm.h: out_dtype) is the GPU's own f32 norm
// rounded, bit for bit, on the packed and scalar paths; its backward is the f32 norm's.
TEST(CudaNorm, NarrowedOutputIsTheNormRounded) {
  REQUIRE_GPU();
  for (bool centred : {true, false}) {
    for (DType out_dtype : {DType::bf16, DType::f16}) {
      for (auto [rows, dim] : {std::pair<int64_t, int64_t>{7, 33}, {300, 768}, {37, 6144}}) {
        const std::string what = str_cat(centred ? "layer_norm" : "rms_norm", " [", rows, ", ", dim,
                                         "] to ", dtype_name(out_dtype));
        const Tensor x =
            leaf(random_tensor({rows, dim}, DType::f32, 1, 2.0f, 0.5f), DType::f32, kGpu);
        const Tensor w = leaf(random_tensor({dim}, DType::f32, 2, 0.5f, 1.0f), DType::f32, kGpu);
        const Tensor b = leaf(random_tensor({dim}, DType::f32, 3, 0.2f), DType::f32, kGpu);
        const Tensor wide = centred ? layer_norm(x, w, b) : rms_norm(x, w);
        const Tensor narrow =
            centred ? layer_norm(x, w, b, 1e-5, out_dtype) : rms_norm(x, w, 1e-6, out_dtype);
        ASSERT_EQ(narrow.dtype(), out_dtype) << what;
        EXPECT_EQ(narrow.to(kCPU).to_float_vector(), wide.to(out_dtype).to(kCPU).to_float_vector())
            << what << " out";
        // The narrow gradient, and the same values widened for the f32 norm.
        const Tensor dy = random_tensor({rows, dim}, out_dtype, 4).to(kGpu);
        backward(wide, dy.to(DType::f32));
        const Tensor dx_wide = x.grad().clone();
        x.set_grad(Tensor());
        backward(narrow, dy);
        EXPECT_EQ(x.grad().to(kCPU).to_float_vector(), dx_wide.to(kCPU).to_float_vector())
            << what << " dx";
      }
    }
  }
}

// The weight and bias gradients are summed in a fixed order: two runs agree to the bit.
TEST(CudaNorm, BackwardRepeatsBitForBit) {
  REQUIRE_GPU();
  const NormCase c{true, 5000, 512, DType::bf16, DType::f32, true};
  const NormRun a = run_norm(c, kGpu, false);
  const NormRun b = run_norm(c, kGpu, false);
  EXPECT_EQ(a.dweight.to(kCPU).to_float_vector(), b.dweight.to(kCPU).to_float_vector());
  EXPECT_EQ(a.dbias.to(kCPU).to_float_vector(), b.dbias.to(kCPU).to_float_vector());
  EXPECT_EQ(a.dx.to(kCPU).to(DType::f32).to_float_vector(),
            b.dx.to(kCPU).to(DType::f32).to_float_vector());
}

// ---- cross_entropy

struct LossRun {
  Tensor loss, dlogits;
};

LossRun run_cross_entropy(const Tensor& logits_value, const Tensor& targets, DType dtype,
                          Device device, double grad) {
  const Tensor logits = leaf(logits_value, dtype, device);
  Tensor loss = cross_entropy(logits, targets.to(device));
  backward(loss, Tensor::full({}, grad, DType::f32, device));
  return {loss.detach(), logits.grad()};
}

void check_cross_entropy(int64_t rows, int64_t vocab, DType dtype, DType index_dtype, double grad) {
  const std::string what = str_cat("cross_entropy [", rows, ", ", vocab, "] ", dtype_name(dtype),
                                   " targets ", dtype_name(index_dtype), " grad ", grad);
  const Tensor logits = random_tensor({rows, vocab}, dtype, 11, 3.0f);
  const Tensor targets = random_targets(rows, vocab, index_dtype, 12);
  const LossRun ref = run_cross_entropy(logits, targets, DType::f32, kCPU, grad);
  const LossRun got = run_cross_entropy(logits, targets, dtype, kGpu, grad);
  EXPECT_EQ(got.loss.dtype(), DType::f32) << what;
  EXPECT_EQ(got.dlogits.dtype(), dtype) << what;
  // Both losses come from the same values in fp32.
  expect_close(got.loss, ref.loss, 2e-5, what + " loss");
  expect_close(got.dlogits, ref.dlogits, tolerance_of(dtype), what + " dlogits");
}

TEST(CudaCrossEntropy, MatchesTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (auto [rows, vocab] :
         {std::pair<int64_t, int64_t>{1, 1}, {1, 7}, {37, 1001}, {300, 1024}, {513, 4096}}) {
      check_cross_entropy(rows, vocab, dtype, DType::i64, 1.0);
    }
    check_cross_entropy(64, 1000, dtype, DType::i32, 2.5);
  }
  // GPT-2's vocabulary.
  check_cross_entropy(256, 50304, DType::bf16, DType::i64, 1.0);
}

TEST(CudaCrossEntropy, RepeatsBitForBit) {
  REQUIRE_GPU();
  const Tensor logits = random_tensor({2048, 8192}, DType::bf16, 21, 4.0f);
  const Tensor targets = random_targets(2048, 8192, DType::i64, 22);
  const LossRun a = run_cross_entropy(logits, targets, DType::bf16, kGpu, 1.0);
  const LossRun b = run_cross_entropy(logits, targets, DType::bf16, kGpu, 1.0);
  EXPECT_EQ(a.loss.to(kCPU).to_float_vector(), b.loss.to(kCPU).to_float_vector());
  EXPECT_EQ(a.dlogits.to(kCPU).to(DType::f32).to_float_vector(),
            b.dlogits.to(kCPU).to(DType::f32).to_float_vector());
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const IndexError& e) {
    return e.what();
  }
  return "no IndexError";
}

TEST(CudaCrossEntropy, BadTargetRaisesTheCpusError) {
  REQUIRE_GPU();
  const Tensor logits = random_tensor({6, 5}, DType::f32, 31);
  const Tensor targets = Tensor::from_ints({0, -100, 4, 7, 9, 1}, {6});
  const std::string cpu = error_of([&] { cross_entropy(logits, targets); });
  const std::string gpu = error_of([&] { cross_entropy(logits.to(kGpu), targets.to(kGpu)); });
  EXPECT_NE(cpu.find("target 7 at position 3"), std::string::npos) << cpu;
  EXPECT_EQ(gpu, cpu);
}

TEST(CudaCrossEntropy, AllIgnoredGivesNanAndZeroGradient) {
  REQUIRE_GPU();
  const Tensor logits = random_tensor({4, 9}, DType::bf16, 41);
  const Tensor targets = Tensor::from_ints({-100, -100, -100, -100}, {4});
  const LossRun got = run_cross_entropy(logits, targets, DType::bf16, kGpu, 1.0);
  EXPECT_TRUE(std::isnan(got.loss.to(kCPU).item()));
  for (float v : got.dlogits.to(kCPU).to(DType::f32).to_float_vector()) EXPECT_EQ(v, 0.0f);
}

// ---- linear_cross_entropy (needs the gemm entry, which another file of the backend fills)

bool has_gemm() {
  const KernelTables* tables = find_kernel_tables(DeviceType::cuda);
  return tables && std::get<GemmKernels>(*tables).gemm;
}

struct FusedRun {
  Tensor loss, dx, dweight;
};

FusedRun run_fused(const Tensor& x_value, const Tensor& w_value, const Tensor& targets, DType dtype,
                   Device device, int64_t chunk, double grad, bool retain) {
  const Tensor x = leaf(x_value, dtype, device);
  const Tensor w = leaf(w_value, dtype, device);
  Tensor loss = linear_cross_entropy_chunked(x, w, targets.to(device), -100, chunk);
  backward(loss, Tensor::full({}, grad, DType::f32, device), retain);
  return {loss.detach(), x.grad(), w.grad()};
}

void check_fused(int64_t rows, int64_t dim, int64_t vocab, int64_t chunk, DType dtype, double grad,
                 bool retain) {
  const std::string what =
      str_cat("linear_cross_entropy rows ", rows, " dim ", dim, " vocab ", vocab, " chunk ", chunk,
              " ", dtype_name(dtype), " grad ", grad, retain ? " retained" : "");
  const Tensor x = random_tensor({rows, dim}, dtype, 51);
  const Tensor w = random_tensor({vocab, dim}, dtype, 52, 0.2f);
  const Tensor targets = random_targets(rows, vocab, DType::i64, 53);
  // The CPU runs bf16 operands through its bf16 GEMMs as the GPU does; f16 it widens.
  const DType reference_dtype = dtype == DType::bf16 ? DType::bf16 : DType::f32;
  const FusedRun ref = run_fused(x, w, targets, reference_dtype, kCPU, chunk, grad, retain);
  const FusedRun got = run_fused(x, w, targets, dtype, kGpu, chunk, grad, retain);
  EXPECT_EQ(got.dx.dtype(), dtype) << what;
  EXPECT_EQ(got.dweight.dtype(), dtype) << what;
  // The logits come from GEMMs that add in different orders: a little looser than one rounding.
  expect_close(got.loss, ref.loss, dtype == DType::f32 ? 2e-5 : 2e-4, what + " loss");
  const double tol = dtype == DType::f32 ? 2e-5 : 2 * tolerance_of(dtype);
  expect_close(got.dx, ref.dx, tol, what + " dx");
  expect_close(got.dweight, ref.dweight, tol, what + " dweight");
}

TEST(CudaLinearCrossEntropy, MatchesTheCpu) {
  REQUIRE_GPU();
  if (!has_gemm()) GTEST_SKIP() << "the CUDA gemm entry is not built yet";
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    check_fused(300, 64, 1000, 128, dtype, 1.0, false);
    check_fused(37, 24, 101, 7, dtype, 2.5, false);
    check_fused(50, 32, 200, 16, dtype, 0.5, true);
  }
  check_fused(1024, 256, 50304, 128, DType::bf16, 1.0, false);
}

// ---- the GPU's allocations against a meta dry run in the native pattern

// Peak allocated growth while `run` makes the op's inputs' leaves from `values` (outside the
// measurement) and runs forward and backward on `device`.
using Scenario = std::function<void(const std::vector<Tensor>& leaves)>;

int64_t scenario_peak(Device device, const std::vector<Tensor>& values,
                      const std::vector<bool>& requires_grad, const Scenario& run) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < values.size(); ++i) {
    Tensor t = device.type == DeviceType::meta
                   ? Tensor::empty(values[i].shape(), values[i].dtype(), kMeta)
                   : values[i].to(device);
    if (requires_grad[i]) t.set_requires_grad(true);
    leaves.push_back(t);
  }
  const int64_t before = static_cast<int64_t>(memory_allocated(device));
  reset_peak_memory_stats(device);
  run(leaves);
  return static_cast<int64_t>(max_memory_allocated(device)) - before;
}

// The GPU's peak equals the meta plan's; the GPU runs once first so that anything a library
// keeps (a GEMM workspace) exists before the measurement.
void expect_meta_plans_the_gpu(const char* what, const std::vector<Tensor>& values,
                               const std::vector<bool>& requires_grad, const Scenario& run) {
  scenario_peak(kGpu, values, requires_grad, run);
  const int64_t gpu = scenario_peak(kGpu, values, requires_grad, run);
  const int64_t meta = scenario_peak(kMeta, values, requires_grad, run);
  EXPECT_EQ(meta, gpu) << what << ": peak allocated bytes differ";
  EXPECT_GT(gpu, 0) << what;
}

TEST(CudaNormLossMemory, MetaDryRunPlansTheGpuPeak) {
  REQUIRE_GPU();
  const Tensor x = random_tensor({300, 768}, DType::bf16, 61);
  const Tensor w = random_tensor({768}, DType::bf16, 62);
  const Tensor b = random_tensor({768}, DType::f32, 63);
  const Tensor dy = random_tensor({300, 768}, DType::bf16, 64);
  expect_meta_plans_the_gpu("layer_norm", {x, w, b, dy}, {true, true, true, false},
                            [](const std::vector<Tensor>& t) {
                              Tensor out = layer_norm(t[0], t[1], t[2]);
                              backward(out, t[3]);
                            });
  expect_meta_plans_the_gpu("rms_norm", {x, w, dy}, {true, true, false},
                            [](const std::vector<Tensor>& t) {
                              Tensor out = rms_norm(t[0], t[1]);
                              backward(out, t[2]);
                            });
  const Tensor logits = random_tensor({513, 4096}, DType::bf16, 65);
  const Tensor targets = random_targets(513, 4096, DType::i64, 66);
  expect_meta_plans_the_gpu("cross_entropy", {logits, targets}, {true, false},
                            [](const std::vector<Tensor>& t) {
                              Tensor loss = cross_entropy(t[0], t[1]);
                              backward(loss);
                            });
  if (!has_gemm()) return;
  const Tensor hidden = random_tensor({300, 64}, DType::bf16, 67);
  const Tensor head = random_tensor({1000, 64}, DType::bf16, 68);
  const Tensor ids = random_targets(300, 1000, DType::i64, 69);
  expect_meta_plans_the_gpu("linear_cross_entropy", {hidden, head, ids}, {true, true, false},
                            [](const std::vector<Tensor>& t) {
                              Tensor loss =
                                  linear_cross_entropy_chunked(t[0], t[1], t[2], -100, 128);
                              backward(loss);
                            });
}

}  // namespace
}  // namespace headroom
