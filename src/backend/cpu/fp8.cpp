// The FP8 family's CPU kernels (backend/fp8_kernels.h): every value widened to f32 exactly, scaled
// and cast by core/fp8_scaling.h's formulas, so that the CUDA kernels, which use the same
// functions, write the same bytes. Work is split over OpenMP threads by chunks of values (per
// tensor) or by blocks; amaxes and counts are reduced at the end.
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/backend_parts.h"
#include "backend/fp8_kernels.h"
#include "core/dtype_convert.h"
#include "core/error.h"

namespace headroom::cpu {
namespace {

constexpr int64_t kChunk = 1024;
// Below this many values one thread is faster than waking the others (as blockwise_quant.cpp).
constexpr int64_t kParallelValues = int64_t{1} << 16;

// The largest |v| of a run of values, NaN when one is NaN (as TE's amax, which NaN poisons).
struct AbsMax {
  float value = 0.0f;
  bool nan = false;
  void add(float v) {
    nan |= v != v;
    const float a = v < 0.0f ? -v : v;
    value = a > value ? a : value;  // NaN compares false: nan records it
  }
  void add(const AbsMax& o) {
    nan = nan || o.nan;
    value = std::max(value, o.value);
  }
  float get() const { return nan ? __builtin_nanf("") : value; }
};

struct Counts {
  int64_t overflow = 0, underflow = 0;
};

// values [offset, offset + n) of a contiguous tensor as f32 into dst.
void load(const Tensor& t, int64_t offset, int64_t n, float* dst) {
  const auto* base = static_cast<const char*>(t.data_ptr());
  convert_to_f32(base + offset * static_cast<int64_t>(dtype_size(t.dtype())), t.dtype(), dst,
                 static_cast<size_t>(n));
}

void check_fp8_dtype(const Tensor& q) {
  HEADROOM_INTERNAL_ASSERT(q.dtype() == DType::f8_e5m2 || q.dtype() == DType::f8_e4m3fn,
                           "fp8: q is ", dtype_name(q.dtype()), " (the op allocates FP8)");
}

// The largest finite value of q's FP8 dtype.
float max_of(const Tensor& q) {
  check_fp8_dtype(q);
  return q.dtype() == DType::f8_e5m2 ? kFp8E5M2Max : kFp8E4M3Max;
}

// q[i] = saturate(v[i] * factor), counting what overflowed and underflowed: fp8_quantize_value's
// arithmetic, with the cast done by the vectorised convert_from_f32 (the same bits: both follow
// Note [Narrow float semantics] with Overflow::saturate).
void quantize_run(const float* v, int64_t n, float factor, DType dtype, float max, uint8_t* q,
                  Counts& counts) {
  float scaled[kChunk];
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t len = std::min(kChunk, n - c0);
    int64_t overflow = 0, underflow = 0;
    for (int64_t i = 0; i < len; ++i) {
      scaled[i] = v[c0 + i] * factor;
      const float a = scaled[i] < 0.0f ? -scaled[i] : scaled[i];
      overflow += a > max && a - a == 0.0f;  // finite and beyond the largest
    }
    convert_from_f32(scaled, q + c0, dtype, static_cast<size_t>(len), Overflow::saturate);
    for (int64_t i = 0; i < len; ++i) underflow += v[c0 + i] != 0.0f && (q[c0 + i] & 0x7Fu) == 0;
    counts.overflow += overflow;
    counts.underflow += underflow;
  }
}

void add_counts(const Tensor& counts, const Counts& c) {
  if (!counts.defined()) return;
  auto* p = static_cast<int64_t*>(counts.data_ptr());
  p[0] += c.overflow;
  p[1] += c.underflow;
}

// Over x's values in chunks widened to f32, on every thread: fn(chunk, offset, length, amax,
// counts) with the thread's amax and counts, which are then summed into the result.
template <typename Fn>
std::pair<AbsMax, Counts> for_chunks(const Tensor& x, Fn fn) {
  const int64_t n = x.numel();
  AbsMax amax;
  Counts counts;
#pragma omp parallel if (n > kParallelValues)
  {
    float buf[kChunk];
    AbsMax local;
    Counts c;
#pragma omp for schedule(static)
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const int64_t len = std::min(kChunk, n - c0);
      load(x, c0, len, buf);
      for (int64_t i = 0; i < len; ++i) local.add(buf[i]);
      fn(buf, c0, len, c);
    }
#pragma omp critical
    {
      amax.add(local);
      counts.overflow += c.overflow;
      counts.underflow += c.underflow;
    }
  }
  return {amax, counts};
}

void quantize_tensorwise(const Tensor& x, const Tensor& scale, bool scale_from_amax_of_x,
                         const Tensor& q, const Tensor& scale_inv, const Tensor& amax,
                         const Tensor& counts) {
  const float max = max_of(q);
  auto* scale_p = static_cast<float*>(scale.data_ptr());
  auto* amax_p = static_cast<float*>(amax.data_ptr());
  if (scale_from_amax_of_x) {
    *amax_p = for_chunks(x, [](const float*, int64_t, int64_t, Counts&) {}).first.get();
    *scale_p = scale_from_amax(*amax_p, max, false);
  }
  const float factor = *scale_p;
  auto* out = static_cast<uint8_t*>(q.data_ptr());
  const auto [seen, total] = for_chunks(x, [&](const float* v, int64_t c0, int64_t len, Counts& c) {
    quantize_run(v, len, factor, q.dtype(), max, out + c0, c);
  });
  if (!scale_from_amax_of_x) {
    // Delayed scaling records into the slot's amax (a max over the step's quantizations).
    AbsMax recorded;
    recorded.add(*amax_p);
    recorded.add(seen);
    *amax_p = recorded.get();
  }
  *static_cast<float*>(scale_inv.data_ptr()) = 1.0f / factor;
  add_counts(counts, total);
}

void quantize_blockwise(const Tensor& x, Fp8BlockShape block, const Tensor& q, const Tensor& scales,
                        const Tensor& counts) {
  const float max = max_of(q);
  const int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  const int64_t brows = (rows + block.block_rows - 1) / block.block_rows;
  const int64_t bcols = (cols + block.block_cols - 1) / block.block_cols;
  auto* out = static_cast<uint8_t*>(q.data_ptr());
  Counts total;
#pragma omp parallel if (x.numel() > kParallelValues)
  {
    std::vector<float> buf(static_cast<size_t>(block.block_cols));
    Counts c;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < brows * bcols; ++b) {
      const int64_t r0 = (b / bcols) * block.block_rows, c0 = (b % bcols) * block.block_cols;
      const int64_t r1 = std::min(rows, r0 + block.block_rows);
      const int64_t width = std::min(cols, c0 + block.block_cols) - c0;
      AbsMax amax;
      for (int64_t r = r0; r < r1; ++r) {
        load(x, r * cols + c0, width, buf.data());
        for (int64_t i = 0; i < width; ++i) amax.add(buf[i]);
      }
      float factor;
      if (block.e8m0) {
        const uint8_t e = mxfp8_block_exponent(amax.get(), max);
        static_cast<uint8_t*>(scales.data_ptr())[b] = e;
        factor = mxfp8_quantize_factor(e);
      } else {
        factor = scale_from_amax(amax.get(), max, true);
        static_cast<float*>(scales.data_ptr())[b] = 1.0f / factor;
      }
      for (int64_t r = r0; r < r1; ++r) {
        load(x, r * cols + c0, width, buf.data());
        quantize_run(buf.data(), width, factor, q.dtype(), max, out + r * cols + c0, c);
      }
    }
#pragma omp critical
    {
      total.overflow += c.overflow;
      total.underflow += c.underflow;
    }
  }
  add_counts(counts, total);
}

void dequantize(const Tensor& q, const Tensor& scales, Fp8BlockShape block, const Tensor& out) {
  check_fp8_dtype(q);
  const int64_t cols = q.size(-1), rows = cols == 0 ? 0 : q.numel() / cols;
  const auto* in = static_cast<const uint8_t*>(q.data_ptr());
  const bool per_tensor = fp8_per_tensor(block);
  const int64_t bcols = per_tensor ? 1 : (cols + block.block_cols - 1) / block.block_cols;
  auto* dst = static_cast<char*>(out.data_ptr());
  const int64_t esize = static_cast<int64_t>(dtype_size(out.dtype()));
  auto scale_of = [&](int64_t r, int64_t c) -> float {
    if (per_tensor) return static_cast<const float*>(scales.data_ptr())[0];
    const int64_t b = (r / block.block_rows) * bcols + c / block.block_cols;
    return block.e8m0 ? e8m0_value(static_cast<const uint8_t*>(scales.data_ptr())[b])
                      : static_cast<const float*>(scales.data_ptr())[b];
  };
#pragma omp parallel if (rows * cols > kParallelValues)
  {
    float buf[kChunk];
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
        const int64_t len = std::min(kChunk, cols - c0);
        convert_to_f32(in + r * cols + c0, q.dtype(), buf, static_cast<size_t>(len));
        for (int64_t i = 0; i < len; ++i) buf[i] *= scale_of(r, c0 + i);
        convert_from_f32(buf, dst + (r * cols + c0) * esize, out.dtype(), static_cast<size_t>(len));
      }
    }
  }
}

void delayed_update(const Tensor& history, const Tensor& scaled_max, AmaxComputeAlgo algo,
                    const Tensor& scale, const Tensor& scale_inv) {
  const int64_t slots = history.size(0), length = history.size(1);
  auto* h = static_cast<float*>(history.data_ptr());
  const auto* m = static_cast<const float*>(scaled_max.data_ptr());
  auto* s = static_cast<float*>(scale.data_ptr());
  auto* si = static_cast<float*>(scale_inv.data_ptr());
  for (int64_t i = 0; i < slots; ++i) {
    delayed_scaling_update(h + i * length, length, algo, m[i], s + i, si + i);
  }
}

}  // namespace

void fill_fp8_kernels(Fp8Kernels& kernels) {
  kernels.quantize_tensorwise = quantize_tensorwise;
  kernels.quantize_blockwise = quantize_blockwise;
  kernels.dequantize = dequantize;
  kernels.delayed_scaling_update = delayed_update;
}

}  // namespace headroom::cpu
