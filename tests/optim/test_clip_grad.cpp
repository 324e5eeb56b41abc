// Gradient clipping against torch.nn.utils.clip_grad_norm_ (tests/fixtures/optim/
// clip_grad_golden.txt, written by tools/gen_sched_clip_golden.py), narrow gradient dtypes, the
// threaded path, non-finite norms, clip_grad_value_, the meta device and the argument checks.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/float_formats.h"
#include "core/kernel_census.h"
#include "io/io_test_helpers.h"
#include "memory/device_memory.h"
#include "ops/elementwise.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/golden_lines.h"

namespace headroom {
namespace {

using io_test::expect_error;
using optim_test::for_each_golden_line;
using optim_test::read_numbers;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct ClipCase {
  std::string id;
  DType dtype = DType::f32;
  double norm_type = 2.0;
  double max_norm = 0.0;
  float total = 0.0f;
  double exact_total = 0.0;         // in float64, of the same (fp32 or bf16) values
  float torch_native_total = 0.0f;  // bf16 cases
  std::map<std::string, std::vector<float>> clipped;
};

struct Golden {
  std::vector<std::string> names;  // in order, "n" (no gradient) last
  std::map<std::string, Shape> shapes;
  std::map<std::string, std::vector<float>> grads;
  std::vector<ClipCase> cases;
};

std::vector<float> to_floats(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

Golden read_golden() {
  Golden golden;
  std::map<std::string, size_t> index;
  const auto read_line = [&](const std::string& kind, std::istringstream& in) {
    std::string name;
    if (kind == "param") {
      auto [param_name, shape] = optim_test::read_param(in);
      golden.names.push_back(param_name);
      golden.shapes[param_name] = shape;
    } else if (kind == "grad") {
      in >> name;
      golden.grads[name] = to_floats(read_numbers(in));
    } else if (kind == "case") {
      ClipCase c;
      std::string dtype, key, norm_type;
      in >> c.id >> dtype >> key >> norm_type >> key >> c.max_norm;
      c.dtype = dtype_from_name(dtype);
      c.norm_type = norm_type == "inf" ? kInf : std::stod(norm_type);
      index[c.id] = golden.cases.size();
      golden.cases.push_back(c);
    } else if (kind == "total" || kind == "exact_total" || kind == "torch_native_total") {
      in >> name;
      ClipCase& c = golden.cases.at(index.at(name));
      const double value = read_numbers(in).at(0);
      if (kind == "exact_total") c.exact_total = value;
      (kind == "total" ? c.total : c.torch_native_total) = static_cast<float>(value);
    } else if (kind == "clipped") {
      std::string id;
      in >> id >> name;
      golden.cases.at(index.at(id)).clipped[name] = to_floats(read_numbers(in));
    }
  };
  for_each_golden_line("clip_grad_golden.txt", read_line);
  return golden;
}

// Parameters named as in the fixture, each with its fixture gradient in `dtype` but "n".
std::vector<Tensor> golden_params(const Golden& golden, DType dtype) {
  std::vector<Tensor> params;
  for (const std::string& name : golden.names) {
    const Shape& shape = golden.shapes.at(name);
    Tensor p = Tensor::zeros(shape).set_requires_grad(true);
    if (auto grad = golden.grads.find(name); grad != golden.grads.end()) {
      p.set_grad(Tensor::from_floats(grad->second, shape, dtype));
    }
    params.push_back(p);
  }
  return params;
}

// |got - want| in units in the last place of `want` as an fp32 (or bf16) number.
double ulps_apart(double got, double want, DType dtype) {
  int exponent = 0;
  std::frexp(want, &exponent);
  const int mantissa_bits = dtype == DType::bf16 ? 7 : 23;
  return std::abs(got - want) / std::ldexp(1.0, exponent - 1 - mantissa_bits);
}

TEST(ClipGradNorm, MatchesTorchGolden) {
  const Golden golden = read_golden();
  ASSERT_EQ(golden.names.size(), 4u);
  ASSERT_EQ(golden.cases.size(), 10u);
  int compared = 0, bit_identical = 0, totals_identical = 0, totals_rounded = 0;
  double worst = 0.0;
  for (const ClipCase& c : golden.cases) {
    SCOPED_TRACE(c.id);
    std::vector<Tensor> params = golden_params(golden, c.dtype);
    EXPECT_EQ(grad_norm(params, c.norm_type),
              clip_grad_norm_(golden_params(golden, c.dtype), 1e30, c.norm_type));
    const double total = clip_grad_norm_(params, c.max_norm, c.norm_type);
    EXPECT_EQ(total, static_cast<double>(static_cast<float>(total))) << "an fp32 value";
    // Accumulated in double, the norm is the exact one to fp32 rounding.
    EXPECT_LE(ulps_apart(total, c.exact_total, DType::f32), 1.0)
        << total << " vs " << c.exact_total;
    totals_rounded += total == static_cast<float>(c.exact_total);
    // torch sums in fp32; for the 3-norm its powf-based result is itself 1.6 ulp off the exact.
    EXPECT_LE(ulps_apart(total, c.total, DType::f32), 3.0) << total << " vs torch " << c.total;
    totals_identical += total == c.total;
    if (c.dtype == DType::bf16) {
      // torch's own bf16 path rounds every norm to bf16; headroom's fp32 norm is within that.
      EXPECT_LE(ulps_apart(total, c.torch_native_total, DType::bf16), 2.0)
          << total << " vs torch's bf16 " << c.torch_native_total;
    }
    EXPECT_FALSE(params.back().grad().defined());
    for (size_t i = 0; i + 1 < params.size(); ++i) {
      const Tensor grad = params[i].grad();
      ASSERT_EQ(grad.dtype(), c.dtype);
      const std::vector<float> got = grad.to_float_vector();
      const std::vector<float>& want = c.clipped.at(golden.names[i]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < got.size(); ++j) {
        // The clip factor inherits the norms' difference (up to 3 ulp), plus one rounding.
        const double apart = ulps_apart(got[j], want[j], c.dtype);
        EXPECT_LE(apart, c.dtype == DType::bf16 ? 1.0 : 5.0)
            << golden.names[i] << "[" << j << "]: " << got[j] << " vs torch " << want[j];
        worst = std::max(worst, apart);
        ++compared;
        bit_identical += got[j] == want[j];
      }
    }
  }
  std::printf(
      "totals: %d of 10 bit-identical to torch, %d of 10 the exact norm rounded; clipped "
      "values: %d of %d bit-identical to torch, at most %.2g ulp apart\n",
      totals_identical, totals_rounded, bit_identical, compared, worst);
}

TEST(ClipGradNorm, F16GradientsAreClippedInFp32AndRoundedOnce) {
  // The f16 values widened are exact fp32 values: the norm is the fp32 one bit for bit, and each
  // clipped element is the fp32 result rounded to f16.
  const Tensor values = Tensor::randn({3000}).to(DType::f16);
  Tensor narrow = Tensor::zeros({3000}).set_requires_grad(true);
  Tensor wide = Tensor::zeros({3000}).set_requires_grad(true);
  narrow.set_grad(values.clone());
  wide.set_grad(values.to(DType::f32));
  const double total = clip_grad_norm_({narrow}, 2.5, 2.0);
  EXPECT_EQ(total, clip_grad_norm_({wide}, 2.5, 2.0));
  EXPECT_GT(total, 2.5);
  EXPECT_EQ(narrow.grad().dtype(), DType::f16);
  EXPECT_EQ(narrow.grad().to_float_vector(), wide.grad().to(DType::f16).to_float_vector());
}

TEST(ClipGradNorm, LargeGradientsMatchADoubleReferenceForAnyThreadCount) {
  // Several threads' ranges, and bf16 staging chunks with a ragged tail.
  const int64_t n = 3 * (1 << 16) + 77;
  const Tensor f32 = Tensor::randn({n});
  const Tensor bf16 = f32.to(DType::bf16);
  for (const Tensor& values : {f32, bf16}) {
    const std::vector<float> v = values.to_float_vector();
    double squares = 0.0, sum = 0.0, max = 0.0;
    for (float x : v) {
      squares += static_cast<double>(x) * x;
      sum += std::abs(x);
      max = std::max(max, static_cast<double>(std::abs(x)));
    }
    Tensor p = Tensor::zeros({n}).set_requires_grad(true);
    p.set_grad(values);
    EXPECT_EQ(grad_norm({p}, 2.0), static_cast<float>(std::sqrt(squares)));
    EXPECT_EQ(grad_norm({p}, 1.0), static_cast<float>(sum));
    EXPECT_EQ(grad_norm({p}, kInf), max);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one_thread = grad_norm({p}, 2.0);
    omp_set_num_threads(saved);
    EXPECT_EQ(one_thread, grad_norm({p}, 2.0));
  }
}

// Note [Tensor lists] (backend/kernel_table.h): 300 gradients of three dtypes take two launches
// of each pass over them, and the result is still the norm of the per-tensor fp32 norms, each
// gradient scaled by the one factor and rounded once in its own dtype.
TEST(ClipGradNorm, ListsLongerThanOneLaunchAreSlicedAndAllClipped) {
  Generator gen(5);
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  std::vector<Tensor> params;
  std::vector<std::vector<float>> before;
  double squares = 0.0;
  for (int i = 0; i < 300; ++i) {
    Tensor p = Tensor::zeros({i % 7 + 1}).set_requires_grad(true);
    p.set_grad(Tensor::randn({i % 7 + 1}, DType::f32, kCPU, &gen).to(dtypes[i % 3]));
    const float norm = static_cast<float>(grad_norm({p}, 2.0));
    squares += static_cast<double>(norm) * norm;
    before.push_back(p.grad().to_float_vector());
    params.push_back(p);
  }
  const float total = static_cast<float>(std::sqrt(squares));
  const float factor = std::min(1.0f, (1.0f / (total + 1e-6f)) * 0.5f);
  ASSERT_LT(factor, 1.0f);
  KernelCensus census;
  double clipped_total = 0.0;
  {
    KernelCensusScope scope(census);
    clipped_total = clip_grad_norm_(params, 0.5);
  }
  EXPECT_EQ(clipped_total, total);
  std::map<std::string, int> launches;
  for (const KernelLaunch& l : census.launches()) ++launches[std::string(l.family) + "." + l.entry];
  EXPECT_EQ(launches["grad_check.norm_partial"], 2);
  EXPECT_EQ(launches["grad_check.norm_combine"], 1);
  EXPECT_EQ(launches["grad_check.scale_by_device_factor"], 2);
  for (size_t i = 0; i < params.size(); ++i) {
    const DType dtype = params[i].grad().dtype();
    std::vector<float> want;
    for (float v : before[i]) {
      want.push_back(Tensor::from_floats({v * factor}, {1}).to(dtype).to_float_vector()[0]);
    }
    EXPECT_EQ(params[i].grad().to_float_vector(), want) << "gradient " << i;
  }
}

// Note [Gradient norms over ranks]: two shares interleaved as ZeRO's partition interleaves them
// (one without a gradient in either), their tables summed as integers as the ranks' all-reduce
// sums them: the norm, the factor and every clipped gradient are one process's to the bit.
TEST(ClipGradNorm, SharesTablesSummedAsIntegersAreOneProcesssClip) {
  auto make = [](int n) {
    std::vector<Tensor> params;
    Generator draws(11);
    for (int i = 0; i < n; ++i) {
      Tensor p = Tensor::zeros({3 * i + 1}).set_requires_grad(true);
      const Tensor g = scale(Tensor::randn({3 * i + 1}, DType::f32, kCPU, &draws), 0.1 + i);
      if (i != 4) p.set_grad(i % 3 == 2 ? g.to(DType::bf16) : g);
      params.push_back(p);
    }
    return params;
  };
  const std::vector<Tensor> whole = make(9), sharded = make(9);
  const Tensor expected = clip_grad_norm_on_device(whole, 0.5);
  std::vector<Tensor> shares[2];
  std::vector<int64_t> rows[2];
  for (int i = 0; i < 9; ++i) {
    const int owner = (i * 5) % 3 == 0 ? 0 : 1;
    shares[owner].push_back(sharded[static_cast<size_t>(i)]);
    rows[owner].push_back(i);
  }
  Tensor table = grad_norm_table(shares[0], rows[0], 9, kCPU);
  const Tensor other = grad_norm_table(shares[1], rows[1], 9, kCPU);
  for (int64_t k = 0; k < table.numel(); ++k) table.data<int64_t>()[k] += other.data<int64_t>()[k];
  const Tensor first = clip_grad_norm_by_table(table, shares[0], 0.5);
  const Tensor second = clip_grad_norm_by_table(table, shares[1], 0.5);
  EXPECT_EQ(first.to_float_vector(), expected.to_float_vector());
  EXPECT_EQ(second.to_float_vector(), expected.to_float_vector());
  ASSERT_LT(expected.to_float_vector()[1], 1.0f) << "the clip acts";
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_EQ(whole[i].grad().defined(), sharded[i].grad().defined());
    if (whole[i].grad().defined()) {
      EXPECT_EQ(sharded[i].grad().to_float_vector(), whole[i].grad().to_float_vector()) << i;
    }
  }
  expect_error<Error>([&] { grad_norm_table(shares[0], {3, 1, 2}, 9, kCPU); }, {"rows increasing"});
}

TEST(ClipGradNorm, ClipsAStridedGradientInPlace) {
  Tensor p = Tensor::zeros({4, 3}).set_requires_grad(true);
  const Tensor storage = Tensor::from_floats({3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4}, {3, 4});
  p.set_grad(storage.transpose(0, 1));
  ASSERT_FALSE(p.grad().is_contiguous());
  EXPECT_EQ(clip_grad_norm_({p}, 1.0), 5.0);
  const std::vector<float> clipped = storage.to_float_vector();
  EXPECT_NEAR(clipped[0], 0.6f, 1e-6);
  EXPECT_NEAR(clipped[11], 0.8f, 1e-6);
}

// The factor is read where it lies, on the gradients' device, so the pass over each gradient
// runs, and bumps its version, whether or not it clips (as torch's _foreach_mul_ does); a factor
// of exactly 1 writes nothing.
TEST(ClipGradNorm, AFactorOfOneLeavesTheValuesAsTheyAre) {
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  p.set_grad(Tensor::from_floats({3, 4}, {2}));
  const uint32_t before = p.grad().storage()->version();
  clip_grad_norm_({p}, 10.0);
  EXPECT_EQ(p.grad().to_float_vector(), (std::vector<float>{3, 4}));
  clip_grad_norm_({p}, 1.0);
  EXPECT_GT(p.grad().storage()->version(), before);
  EXPECT_NEAR(p.grad().to_float_vector()[1], 0.8f, 1e-6);
}

TEST(ClipGradNorm, NonFiniteNormsRaiseOnlyWhenAsked) {
  for (const float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Tensor p = Tensor::zeros({3}).set_requires_grad(true);
    p.set_grad(Tensor::from_floats({1.0f, bad, 2.0f}, {3}));
    const std::string shown = std::isnan(bad) ? "(nan)" : "(inf)";
    expect_error<Error>(
        [&] { clip_grad_norm_({p}, 1.0, 2.0, true); },
        {"clip_grad_norm_", "order 2", "non-finite " + shown, "error_if_nonfinite=false"});
    EXPECT_EQ(p.grad().to_float_vector()[0], 1.0f) << "no gradient changes";
    // As torch: inf gives the factor 0 (and inf * 0 = NaN), NaN makes every element NaN.
    const double total = clip_grad_norm_({p}, 1.0);
    EXPECT_EQ(std::isnan(total), std::isnan(bad));
    const std::vector<float> got = p.grad().to_float_vector();
    EXPECT_TRUE(std::isnan(got[1]));
    if (std::isnan(bad)) {
      EXPECT_TRUE(std::isnan(got[0]));
    } else {
      EXPECT_EQ(got[0], 0.0f);
      EXPECT_EQ(got[2], 0.0f);
    }
  }
  Tensor q = Tensor::zeros({2}).set_requires_grad(true);
  q.set_grad(Tensor::from_floats({1, std::numeric_limits<float>::infinity()}, {2}));
  expect_error<Error>([&] { clip_grad_norm_({q}, 1.0, kInf, true); }, {"order inf"});
}

TEST(ClipGradNorm, ChecksItsArguments) {
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  p.set_grad(Tensor::ones({2}));
  expect_error<ValueError>([&] { clip_grad_norm_({p}, -1.0); }, {"max_norm is -1"});
  expect_error<ValueError>([&] { clip_grad_norm_({p}, std::nan("")); }, {"max_norm is nan"});
  expect_error<ValueError>([&] { clip_grad_norm_({p}, 1.0, 0.0); },
                           {"norm_type is 0", "the 0-norm is not supported"});
  expect_error<ValueError>([&] { grad_norm({p}, -2.0); }, {"grad_norm", "norm_type is -2"});
  expect_error<ValueError>([&] { clip_grad_value_({p}, -0.5); }, {"clip_value is -0.5"});
  expect_error<ValueError>(
      [&] {
        clip_grad_norm_({p, Tensor()}, 1.0);
      },
      {"parameter 1 is undefined"});

  Tensor f8 = Tensor::zeros({2}).set_requires_grad(true);
  f8.set_grad(Tensor::zeros({2}, DType::f8_e4m3fn));
  expect_error<NotImplementedError>(
      [&] {
        clip_grad_norm_({p, f8}, 1.0);
      },
      {"gradient of parameter 1 is f8_e4m3fn"});
  Tensor meta = Tensor::empty({2}, DType::f32, kMeta).set_requires_grad(true);
  meta.set_grad(Tensor::empty({2}, DType::f32, kMeta));
  expect_error<ValueError>([&] { clip_grad_norm_({p, meta}, 1.0); }, {"cpu", "meta"});
  EXPECT_EQ(p.grad().to_float_vector(), (std::vector<float>{1, 1})) << "nothing clipped";
}

TEST(ClipGradNorm, WithoutGradientsTheNormIsZero) {
  Tensor p = Tensor::zeros({2}).set_requires_grad(true);
  EXPECT_EQ(clip_grad_norm_({p}, 1.0), 0.0);
  EXPECT_EQ(clip_grad_norm_(std::vector<Tensor>{}, 1.0), 0.0);
  p.set_grad(Tensor::zeros({2}));
  EXPECT_EQ(clip_grad_norm_({p}, 1.0), 0.0);
  EXPECT_EQ(p.grad().to_float_vector(), (std::vector<float>{0, 0}));
}

TEST(ClipGradNorm, OnMetaComputesNothingAndReturnsZero) {
  Tensor p = Tensor::empty({1024, 1024}, DType::bf16, kMeta).set_requires_grad(true);
  p.set_grad(Tensor::empty({1024, 1024}, DType::bf16, kMeta));
  const size_t before = memory_allocated(kMeta);
  EXPECT_EQ(clip_grad_norm_({p}, 1.0), 0.0);
  EXPECT_EQ(grad_norm({p}, kInf), 0.0);
  clip_grad_value_({p}, 0.1);
  EXPECT_EQ(memory_allocated(kMeta), before);
}

TEST(ClipGradNorm, TakesAnOptimizersParameters) {
  Tensor a = Tensor::zeros({2}).set_requires_grad(true);
  Tensor b = Tensor::zeros({1}).set_requires_grad(true);
  Tensor c = Tensor::zeros({1}).set_requires_grad(true);
  a.set_grad(Tensor::from_floats({3, 0}, {2}));
  c.set_grad(Tensor::from_floats({4}, {1}));
  AdamW optimizer(
      std::vector<ParamGroup>{{.params = {{"a", a}, {"b", b}}}, {.params = {{"c", c}}, .lr = 0.1}});
  EXPECT_EQ(grad_norm(optimizer), 5.0);
  EXPECT_EQ(clip_grad_norm_(optimizer, 0.5, 1.0), 7.0);
  EXPECT_NEAR(a.grad().to_float_vector()[0], 3.0 * 0.5 / 7.0, 1e-6);
  clip_grad_value_(optimizer, 0.25);
  EXPECT_EQ(c.grad().to_float_vector()[0], 0.25f);
}

TEST(ClipGradValue, ClampsEveryElementAsTorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor p = Tensor::zeros({6}).set_requires_grad(true);
  p.set_grad(Tensor::from_floats({-3.0f, -0.3f, 0.1f, 0.31f, 2.0f, nan}, {6}));
  clip_grad_value_({p}, 0.3);
  const std::vector<float> got = p.grad().to_float_vector();
  EXPECT_EQ(got[0], -0.3f);
  EXPECT_EQ(got[1], -0.3f);
  EXPECT_EQ(got[2], 0.1f);
  EXPECT_EQ(got[3], 0.3f);
  EXPECT_EQ(got[4], 0.3f);
  EXPECT_TRUE(std::isnan(got[5]));

  // bf16: torch clamps against bf16(0.3) = 0.30078125, which is what rounding the fp32 clamp gives.
  Tensor q = Tensor::zeros({3}).set_requires_grad(true);
  q.set_grad(Tensor::from_floats({1.0f, -1.0f, 0.25f}, {3}, DType::bf16));
  clip_grad_value_({q}, 0.3);
  EXPECT_EQ(q.grad().to_float_vector(), (std::vector<float>{0.30078125f, -0.30078125f, 0.25f}));
}

}  // namespace
}  // namespace headroom
