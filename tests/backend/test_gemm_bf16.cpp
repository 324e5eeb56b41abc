// cpu::gemm_bf16 and cpu::gemm_bf16_batched against the same products computed in double from the
// same bf16 values, within the error bound of fp32 accumulation; bf16 results within that bound of
// a rounding boundary may land on either side of it, all others must be the nearest-even bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <dnnl.h>

#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace headroom::cpu {
namespace {

struct Problem {
  bool trans_a = false, trans_b = false;
  int64_t m = 1, n = 1, k = 1;
  int64_t pad = 0;    // added to every leading dimension
  int64_t batch = 1;  // gemm_bf16_batched when `batched`, else gemm_bf16
  bool batched = false;
  int64_t gap = 0;           // extra elements between the matrices of a batch
  bool broadcast_b = false;  // stride_b 0: every matrix of the batch uses the same B
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  DType c_dtype = DType::f32;
  int64_t row_step = 1;  // the oracle checks every row_step-th row of C (for the large shapes)

  int64_t lda() const { return (trans_a ? m : k) + pad; }
  int64_t ldb() const { return (trans_b ? k : n) + pad; }
  int64_t ldc() const { return n + pad; }
  int64_t stride_a() const { return (trans_a ? k : m) * lda() + gap; }
  int64_t stride_b() const { return broadcast_b ? 0 : (trans_b ? n : k) * ldb() + gap; }
  int64_t stride_c() const { return m * ldc() + gap; }
};

// One call's inputs and C before and after it; C is kept as raw bytes of its dtype.
struct GemmData {
  std::vector<BFloat16> a, b;
  std::vector<float> bias;
  std::vector<uint8_t> c_before, c_after;
};

float c_value(const Problem& p, const std::vector<uint8_t>& c, int64_t index) {
  if (p.c_dtype == DType::bf16) {
    uint16_t bits;
    std::memcpy(&bits, c.data() + index * 2, 2);
    return bf16_bits_to_f32(bits);
  }
  float value;
  std::memcpy(&value, c.data() + index * 4, 4);
  return value;
}

// Random inputs: uniform in [-1, 1], uniform in [0.5, 1] (no cancellation, so the error bound is
// small against the result) or multiples of 1/4 in [-2, 2] (products and sums exact in fp32).
// C starts as NaN when beta is 0, which must then not be read.
enum class Values { uniform, positive, quarters };

// splitmix64: varied values are all these tests need, and mt19937 with a distribution costs more
// than the GEMMs on the large shapes.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * 0x1p-24f;
  }

 private:
  uint64_t state_;
};

GemmData make_inputs(const Problem& p, uint64_t seed, Values values = Values::uniform) {
  Random rng(seed);
  auto draw = [&] {
    if (values == Values::positive) return rng.uniform(0.5f, 1.0f);
    if (values == Values::uniform) return rng.uniform(-1.0f, 1.0f);
    return static_cast<float>(static_cast<int>(rng.next() % 17) - 8) * 0.25f;
  };
  GemmData run;
  run.a.resize(static_cast<size_t>(p.batch * p.stride_a()));
  run.b.resize(static_cast<size_t>(p.broadcast_b ? p.stride_b() + (p.trans_b ? p.n : p.k) * p.ldb()
                                                 : p.batch * p.stride_b()));
  for (BFloat16& x : run.a) x = BFloat16(draw());
  for (BFloat16& x : run.b) x = BFloat16(draw());
  if (p.bias) {
    run.bias.resize(static_cast<size_t>(p.n));
    for (float& x : run.bias) x = draw();
  }
  const size_t c_count = static_cast<size_t>(p.batch * p.stride_c());
  run.c_before.resize(c_count * dtype_size(p.c_dtype));
  for (size_t i = 0; i < c_count; ++i) {
    const float x = p.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : draw();
    if (p.c_dtype == DType::bf16) {
      const uint16_t bits = f32_to_bf16_bits(x);
      std::memcpy(run.c_before.data() + i * 2, &bits, 2);
    } else {
      std::memcpy(run.c_before.data() + i * 4, &x, 4);
    }
  }
  return run;
}

void call(const Problem& p, GemmData& run) {
  run.c_after = run.c_before;
  if (p.batched) {
    gemm_bf16_batched(p.trans_a, p.trans_b, p.batch, p.m, p.n, p.k, p.alpha, run.a.data(), p.lda(),
                      p.stride_a(), run.b.data(), p.ldb(), p.stride_b(), p.beta, run.c_after.data(),
                      p.c_dtype, p.ldc(), p.stride_c());
  } else {
    gemm_bf16(p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, run.a.data(), p.lda(), run.b.data(),
              p.ldb(), p.beta, run.c_after.data(), p.c_dtype, p.ldc(),
              p.bias ? run.bias.data() : nullptr);
  }
}

// x rounded to the nearest bf16, ties to even, in double (no double rounding through f32).
double round_to_bf16(double x) {
  if (x == 0.0) return x;
  int exponent;
  std::frexp(x, &exponent);  // |x| in [2^(exponent-1), 2^exponent): 8 significant bits
  return std::ldexp(std::nearbyint(std::ldexp(x, 8 - exponent)), exponent - 8);
}

// Checks every computed element of C; returns how many are wrong and describes the first.
// An fp32 result may differ from the exact one by the bound of a k-term fp32 dot product plus
// the few roundings of alpha, beta and the bias, taken twice over: (k + 4) * 2^-23 times the sum
// of the magnitudes involved. A bf16 result is the nearest-even rounding of such an fp32 value,
// so it must lie between the roundings of (exact - bound) and (exact + bound): rounding is
// monotonic. That is the nearest-even bf16 of the exact value, or, when the exact value lies
// within the bound of a rounding boundary, its neighbour across that boundary.
int64_t count_errors(const Problem& p, const GemmData& run, std::string& first) {
  int64_t errors = 0;
  auto report = [&](const std::string& what) {
    if (errors++ == 0) first = what;
  };
  const int64_t lda = p.lda(), ldb = p.ldb(), ldc = p.ldc();
  for (int64_t batch = 0; batch < p.batch; ++batch) {
    const BFloat16* a = run.a.data() + batch * p.stride_a();
    const BFloat16* b = run.b.data() + batch * p.stride_b();
    const int64_t c0 = batch * p.stride_c();
    for (int64_t i = 0; i < p.m; ++i) {
      const bool checked = i % p.row_step == 0 || i == p.m - 1;
      for (int64_t j = 0; j < ldc; ++j) {
        const int64_t index = c0 + i * ldc + j;
        const float got = c_value(p, run.c_after, index), before = c_value(p, run.c_before, index);
        if (j >= p.n) {  // padding: untouched
          if (std::memcmp(&got, &before, sizeof got) != 0) report(str_cat("padding at ", index));
          continue;
        }
        if (!checked) continue;
        double dot = 0.0, magnitude = 0.0;
        for (int64_t kk = 0; kk < p.k; ++kk) {
          const double x = static_cast<float>(p.trans_a ? a[kk * lda + i] : a[i * lda + kk]);
          const double y = static_cast<float>(p.trans_b ? b[j * ldb + kk] : b[kk * ldb + j]);
          dot += x * y;
          magnitude += std::fabs(x * y);
        }
        double exact = double{p.alpha} * dot;
        magnitude *= std::fabs(p.alpha);
        if (p.beta != 0.0f) {
          exact += double{p.beta} * before;
          magnitude += std::fabs(double{p.beta} * before);
        }
        if (p.bias) {
          exact += run.bias[j];
          magnitude += std::fabs(run.bias[j]);
        }
        const double bound = static_cast<double>(p.k + 4) * 0x1p-23 * magnitude;
        const bool ok = p.c_dtype == DType::bf16 ? round_to_bf16(exact - bound) <= got &&
                                                       got <= round_to_bf16(exact + bound)
                                                 : std::fabs(got - exact) <= bound;
        if (!ok) {
          report(str_cat("C[", batch, "][", i, "][", j, "] = ", got, ", exact ", exact, ", bound ",
                         bound));
        }
      }
    }
  }
  return errors;
}

void expect_correct(const Problem& p, uint64_t seed = 1) {
  GemmData run = make_inputs(p, seed);
  call(p, run);
  std::string first;
  const int64_t errors = count_errors(p, run, first);
  EXPECT_EQ(errors, 0) << "first: " << first << " (m " << p.m << ", n " << p.n << ", k " << p.k
                       << ", trans " << int{p.trans_a} << int{p.trans_b} << ", pad " << p.pad
                       << ", batch " << p.batch << ", " << dtype_name(p.c_dtype) << ")";
}

TEST(GemmBf16, TransposesLeadingDimensionsAlphaBetaBias) {
  for (DType c_dtype : {DType::f32, DType::bf16}) {
    for (int64_t pad : {0, 3}) {  // 0: dense (brgemm), 3: strided (oneDNN's gemm:jit)
      for (int t = 0; t < 4; ++t) {
        Problem p;
        p.trans_a = t & 1, p.trans_b = t & 2;
        p.m = 37, p.n = 29, p.k = 45, p.pad = pad, p.c_dtype = c_dtype;
        expect_correct(p);
        p.alpha = 1.5f, p.beta = -0.75f, p.bias = true;  // bias as a post-op (alpha != 1)
        expect_correct(p);
        p.alpha = 1.0f, p.beta = 1.0f;  // bias as the primitive's own
        expect_correct(p);
      }
    }
  }
}

TEST(GemmBf16, SizesWithOnesAndOddSizes) {
  const int64_t sizes[][3] = {{1, 1, 1},   {1, 64, 300}, {300, 1, 7},  {7, 300, 1},
                              {1, 1, 513}, {65, 33, 17}, {129, 257, 3}};
  for (const auto& [m, n, k] : sizes) {
    for (DType c_dtype : {DType::f32, DType::bf16}) {
      Problem p;
      p.m = m, p.n = n, p.k = k, p.c_dtype = c_dtype, p.beta = 0.5f, p.bias = true;
      expect_correct(p);
      p.trans_a = true, p.pad = 1;
      expect_correct(p);
    }
  }
}

TEST(GemmBf16, KZeroScalesCAndAddsBias) {
  for (DType c_dtype : {DType::f32, DType::bf16}) {
    Problem p;
    p.m = 5, p.n = 7, p.k = 0, p.pad = 1, p.c_dtype = c_dtype, p.beta = 0.5f, p.bias = true;
    expect_correct(p);
    p.beta = 0.0f;  // C = bias, the NaNs in C unread
    expect_correct(p);
  }
}

TEST(GemmBf16, LargeShape) {
  Problem p;
  p.m = 256, p.n = 768, p.k = 3072, p.beta = 1.0f, p.bias = true, p.row_step = 51;
  expect_correct(p);
  p.trans_a = true, p.trans_b = true, p.c_dtype = DType::bf16, p.alpha = 0.5f, p.beta = 0.0f;
  expect_correct(p);
}

TEST(GemmBf16, Batched) {
  for (DType c_dtype : {DType::f32, DType::bf16}) {
    for (int t = 0; t < 4; ++t) {
      Problem p;
      p.batched = true, p.batch = 3, p.trans_a = t & 1, p.trans_b = t & 2;
      p.m = 24, p.n = 40, p.k = 56, p.c_dtype = c_dtype;
      expect_correct(p);  // dense
      p.broadcast_b = true;
      expect_correct(p);
      p.broadcast_b = false, p.gap = 5, p.pad = 2, p.alpha = 0.5f, p.beta = 2.0f;
      expect_correct(p);  // strided
      p.broadcast_b = true;
      expect_correct(p);
    }
    Problem one;
    one.batched = true, one.m = 9, one.n = 10, one.k = 11, one.gap = 7, one.c_dtype = c_dtype;
    expect_correct(one);
  }
}

// Copies the `batch` rows x cols matrices of q's layout (leading dimension and batch stride in
// elements of `size` bytes) into p's.
void relayout(const void* src, const Problem& q, void* dst, const Problem& p, int64_t batch,
              int64_t rows, int64_t cols, size_t size, int64_t (Problem::*ld)() const,
              int64_t (Problem::*stride)() const) {
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<char*>(dst) + ((p.*stride)() * i + (p.*ld)() * r) * size,
                  static_cast<const char*>(src) + ((q.*stride)() * i + (q.*ld)() * r) * size,
                  static_cast<size_t>(cols) * size);
    }
  }
}

// Strided operands are copied into dense ones for the dense kernel, so they give its bits.
TEST(GemmBf16, StridedLayoutsGiveTheDenseBits) {
  for (DType c_dtype : {DType::f32, DType::bf16}) {
    Problem dense;
    dense.batched = true, dense.batch = 2, dense.trans_a = true, dense.m = 48, dense.n = 80;
    dense.k = 640, dense.beta = 0.5f, dense.c_dtype = c_dtype;
    Problem strided = dense;
    strided.pad = 24, strided.gap = 8;
    GemmData x = make_inputs(dense, 11), y = make_inputs(strided, 12);
    const size_t c_size = dtype_size(c_dtype);
    relayout(x.a.data(), dense, y.a.data(), strided, dense.batch, dense.k, dense.m,
             sizeof(BFloat16), &Problem::lda, &Problem::stride_a);
    relayout(x.b.data(), dense, y.b.data(), strided, dense.batch, dense.k, dense.n,
             sizeof(BFloat16), &Problem::ldb, &Problem::stride_b);
    relayout(x.c_before.data(), dense, y.c_before.data(), strided, dense.batch, dense.m, dense.n,
             c_size, &Problem::ldc, &Problem::stride_c);
    call(dense, x);
    call(strided, y);
    std::vector<uint8_t> y_dense(x.c_after.size());
    relayout(y.c_after.data(), strided, y_dense.data(), dense, dense.batch, dense.m, dense.n,
             c_size, &Problem::ldc, &Problem::stride_c);
    EXPECT_TRUE(y_dense == x.c_after) << dtype_name(c_dtype);
  }
}

// With inputs whose products and sums are exact in fp32, nothing rounds but the final bf16 store.
TEST(GemmBf16, ExactWhenNothingRounds) {
  for (DType c_dtype : {DType::f32, DType::bf16}) {
    for (int64_t pad : {0, 1}) {
      Problem p;
      p.m = 64, p.n = 96, p.k = 768, p.pad = pad, p.c_dtype = c_dtype;
      p.alpha = 0.5f, p.beta = 2.0f, p.bias = true;
      GemmData run = make_inputs(p, 7, Values::quarters);
      call(p, run);
      int64_t errors = 0;
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) {
          double exact = double{p.beta} * c_value(p, run.c_before, i * p.ldc() + j) + run.bias[j];
          for (int64_t kk = 0; kk < p.k; ++kk) {
            exact += double{p.alpha} * static_cast<float>(run.a[i * p.lda() + kk]) *
                     static_cast<float>(run.b[kk * p.ldb() + j]);
          }
          if (c_dtype == DType::bf16) exact = round_to_bf16(exact);
          errors += c_value(p, run.c_after, i * p.ldc() + j) != exact;
        }
      }
      EXPECT_EQ(errors, 0) << dtype_name(c_dtype) << ", pad " << pad;
    }
  }
}

TEST(GemmBf16, RepeatedCallsAreBitIdentical) {
  for (DType c_dtype : {DType::f32, DType::bf16}) {
    Problem p;
    p.m = 256, p.n = 768, p.k = 3072, p.c_dtype = c_dtype, p.bias = true;
    GemmData run = make_inputs(p, 3);
    call(p, run);
    const std::vector<uint8_t> first = run.c_after;
    for (int repeat = 0; repeat < 2; ++repeat) {
      call(p, run);
      EXPECT_TRUE(run.c_after == first) << dtype_name(c_dtype) << ", repeat " << repeat;
    }
  }
}

// Two threads sharing the primitive cache, each with its own stream and scratchpad.
TEST(GemmBf16, ConcurrentCallsGiveTheSerialBits) {
  Problem p[2];
  p[0].m = 96, p[0].n = 64, p[0].k = 256, p[0].bias = true;
  p[1].m = 64, p[1].n = 128, p[1].k = 192, p[1].trans_b = true, p[1].c_dtype = DType::bf16;
  GemmData serial[2] = {make_inputs(p[0], 21), make_inputs(p[1], 22)};
  for (int i = 0; i < 2; ++i) call(p[i], serial[i]);
  bool same[2] = {true, true};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      GemmData run = serial[i];
      for (int repeat = 0; repeat < 20; ++repeat) {
        call(p[i], run);
        same[i] = same[i] && run.c_after == serial[i].c_after;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_TRUE(same[0]);
  EXPECT_TRUE(same[1]);
}

// The oracle is tight enough to catch a result two bf16 steps, or a quarter of a bf16 step, away
// (with positive inputs: without cancellation the bound is far below a bf16 step).
TEST(GemmBf16, OracleRejectsWrongResults) {
  for (DType c_dtype : {DType::f32, DType::bf16}) {
    Problem p;
    p.m = 8, p.n = 8, p.k = 16, p.c_dtype = c_dtype;
    GemmData run = make_inputs(p, 5, Values::positive);
    call(p, run);
    std::string first;
    ASSERT_EQ(count_errors(p, run, first), 0) << first;
    for (int64_t index = 0; index < p.m * p.n; ++index) {
      GemmData wrong = run;
      const float got = c_value(p, run.c_after, index);
      if (c_dtype == DType::bf16) {
        const uint16_t bits = static_cast<uint16_t>(f32_to_bf16_bits(got) + (got > 0 ? 2 : -2));
        std::memcpy(wrong.c_after.data() + index * 2, &bits, 2);
      } else {
        const float moved = got * (1.0f + 0x1p-10f);
        std::memcpy(wrong.c_after.data() + index * 4, &moved, 4);
      }
      EXPECT_EQ(count_errors(p, wrong, first), 1) << "element " << index;
    }
  }
}

// Note [bf16 GEMM on oneDNN's matmul primitive]: on a CPU with AVX512_BF16 the dense kernel is
// one of oneDNN's bf16 kernels, unless ONEDNN_MAX_CPU_ISA holds oneDNN below it; held below
// AVX-512 (the GemmBf16.WidenedOnAvx2 entry of tests/CMakeLists.txt) oneDNN 2.6 has no bf16
// matmul and the fp32 fallback runs.
TEST(GemmBf16, RunsTheCpusBf16InstructionsWhereOneDnnMayUseThem) {
  auto includes = [](dnnl_cpu_isa_t isa, dnnl_cpu_isa_t subset) {
    return (static_cast<unsigned>(isa) & static_cast<unsigned>(subset)) ==
           static_cast<unsigned>(subset);
  };
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  Problem p;
  p.m = 64, p.n = 96, p.k = 128;
  GemmData run = make_inputs(p, 9);
  call(p, run);
  std::string first;
  EXPECT_EQ(count_errors(p, run, first), 0) << first;
  const std::string kernel = gemm_bf16_last_kernel();
  if (!includes(isa, dnnl_cpu_isa_avx512_core)) {
    EXPECT_EQ(kernel, "widened") << "oneDNN's ISA 0x" << std::hex << isa;
    return;
  }
  if (!__builtin_cpu_supports("avx512bf16")) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16 (oneDNN may emulate bf16 on AVX-512: kernel "
                 << kernel << ")";
  }
  if (!includes(isa, dnnl_cpu_isa_avx512_core_bf16)) {
    ASSERT_NE(std::getenv("ONEDNN_MAX_CPU_ISA"), nullptr)
        << "the CPU has AVX512_BF16 but oneDNN does not use it (ISA 0x" << std::hex << isa << ")";
    GTEST_SKIP() << "ONEDNN_MAX_CPU_ISA=" << std::getenv("ONEDNN_MAX_CPU_ISA")
                 << " holds oneDNN below AVX512_BF16 (kernel " << kernel << ")";
  }
  EXPECT_NE(kernel, "widened");
  EXPECT_EQ(kernel.rfind("brg:avx512_core", 0), 0u) << kernel;
  EXPECT_NE(kernel.find("bf16"), std::string::npos) << kernel;
  // Strided operands are packed for the same dense kernel.
  p.pad = 3;
  run = make_inputs(p, 10);
  call(p, run);
  EXPECT_EQ(gemm_bf16_last_kernel(), kernel);
  // k == 0 computes beta * C and the bias without oneDNN.
  p.k = 0, p.beta = 0.5f;
  run = make_inputs(p, 11);
  call(p, run);
  EXPECT_EQ(gemm_bf16_last_kernel(), "widened");
}

TEST(GemmBf16, RejectsOtherOutputDtypes) {
  std::vector<BFloat16> a(4), b(4);
  std::vector<uint16_t> c(4);
  EXPECT_THROW(gemm_bf16(false, false, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(),
                         DType::f16, 2),
               ValueError);
}

}  // namespace
}  // namespace headroom::cpu
