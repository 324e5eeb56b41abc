// The CPU's sums (backend/reduction_kernels.h), accumulated in double from the elements' fp32
// values in an order fixed by the sizes alone, never by the thread count, so results repeat bit
// for bit. bf16 / f16 inputs are widened a tile at a time into the thread's scratch; each result
// is rounded once into the output's dtype (through fp32, as the CUDA kernels store it).
//
// sum_all: up to kSumAllOneBlock elements one pass in order; beyond, kSumAllPartials contiguous
// chunks summed in parallel into the op's workspace, then added in chunk order. sum_middle:
// independent outputs split over the threads, rows summed in order; when the reduced dimension
// is not the last, tiles of kColumns adjacent outputs keep their sums side by side, so the loads
// stay contiguous and no transpose is made.

#include <cstring>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/reduction.h"
#include "backend/cpu/widen_rows.h"
#include "backend/reduction_kernels.h"
#include "core/error.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kGrain = 1 << 15;  // elements below which one thread does all
constexpr int64_t kTile = 2048;      // elements widened at a time
constexpr int64_t kColumns = 256;    // adjacent outputs summed together when inner > 1

// Sum in double of `len` fp32 values, in order, added to s.
double add_in_order(double s, const float* v, int64_t len) {
  for (int64_t i = 0; i < len; ++i) s += v[i];
  return s;
}

// Sum of elements [begin, end) of x, read through read(offset, len, buf) -> const float*.
template <typename Read>
double sum_range(int64_t begin, int64_t end, float* buf, const Read& read) {
  double s = 0.0;
  for (int64_t c = begin; c < end; c += kTile) {
    const int64_t len = end - c < kTile ? end - c : kTile;
    s = add_in_order(s, read(c, len, buf), len);
  }
  return s;
}

// out[o * inner + i] = write(.., factor * sum_j x[(o * n + j) * inner + i]) for x [outer, n,
// inner], read through read(offset, len, buf); write(index, double) stores one result.
template <typename Read, typename Write>
void sum_middle_with(int64_t outer, int64_t n, int64_t inner, const Read& read,
                     const Write& write) {
  const bool parallel = outer * n * inner > kGrain;
  if (inner == 1) {
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      write(o, sum_range(o * n, o * n + n, thread_scratch(kTile), read));
    }
    return;
  }
  const int64_t tiles = (inner + kColumns - 1) / kColumns;
#pragma omp parallel for collapse(2) if (parallel) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t begin = t * kColumns;
      const int64_t len = inner - begin < kColumns ? inner - begin : kColumns;
      float* buf = thread_scratch(kColumns);
      double acc[kColumns] = {};
      for (int64_t j = 0; j < n; ++j) {
        const float* row = read((o * n + j) * inner + begin, len, buf);
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) acc[i] += row[i];
      }
      for (int64_t i = 0; i < len; ++i) write(o * inner + begin + i, acc[i]);
    }
  }
}

// Reads elements of a contiguous tensor as fp32 (widen_span).
auto reader_of(const Tensor& x) {
  return [&x](int64_t offset, int64_t len, float* buf) { return widen_span(x, offset, len, buf); };
}

// Element `index` of out set to `value` rounded to fp32, then to out's dtype.
void store_one(const Tensor& out, int64_t index, double value) {
  float v = static_cast<float>(value);
  float* target = span_target(out, index, &v);
  *target = v;
  store_span(out, index, 1, target);
}

void check_dtype(const char* kernel, const char* argument, DType dtype) {
  HEADROOM_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "cpu ", kernel,
                 ": ", argument, " must be f32, bf16 or f16, not ", dtype_name(dtype));
}

void sum_all(const Tensor& x, double factor, const Tensor& partial, const Tensor& out) {
  ensure_flush_denormal();
  check_dtype("sum_all", "x", x.dtype());
  check_dtype("sum_all", "out", out.dtype());
  const int64_t n = x.numel();
  const int64_t chunks = sum_all_partials(n);
  const auto read = reader_of(x);
  if (chunks == 0) {
    store_one(out, 0, sum_range(0, n, thread_scratch(kTile), read) * factor);
    return;
  }
  HEADROOM_CHECK(partial.defined() && partial.numel() >= chunks && partial.element_size() == 8,
                 "cpu sum_all: ", n, " elements need a workspace of ", chunks,
                 " 8-byte partial sums");
  auto* sums = static_cast<double*>(partial.data_ptr());
  const int64_t per = (n + chunks - 1) / chunks;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * per < n ? c * per : n, end = begin + per < n ? begin + per : n;
    sums[c] = sum_range(begin, end, thread_scratch(kTile), read);
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += sums[c];
  store_one(out, 0, total * factor);
}

void fill_scaled(const Tensor& dst, const Tensor& scalar, double factor) {
  check_dtype("fill_scaled", "dst", dst.dtype());
  check_dtype("fill_scaled", "scalar", scalar.dtype());
  float g = 0.0f;
  const float* gv = widen_span(scalar, 0, 1, &g);
  // As the CUDA kernel: the product in double, rounded to fp32, then to dst's dtype.
  const float v = static_cast<float>(static_cast<double>(*gv) * factor);
  const int64_t n = dst.numel();
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for if (n > kGrain) schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t begin = t * kTile, len = n - begin < kTile ? n - begin : kTile;
    float* target = span_target(dst, begin, thread_scratch(kTile));
    for (int64_t i = 0; i < len; ++i) target[i] = v;
    store_span(dst, begin, len, target);
  }
}

}  // namespace

void sum_middle_tensor(const Tensor& x, int64_t outer, int64_t n, int64_t inner, double factor,
                       const Tensor& out) {
  ensure_flush_denormal();
  check_dtype("sum_middle", "x", x.dtype());
  check_dtype("sum_middle", "out", out.dtype());
  sum_middle_with(outer, n, inner, reader_of(x),
                  [&out, factor](int64_t index, double s) { store_one(out, index, s * factor); });
}

void fill_reduction_kernels(ReductionKernels& kernels) {
  kernels.sum_all = sum_all;
  kernels.sum_middle = sum_middle_tensor;
  kernels.fill_scaled = fill_scaled;
}

}  // namespace headroom::cpu
