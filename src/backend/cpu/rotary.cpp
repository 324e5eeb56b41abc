// Rotary position embedding on the CPU (HF Llama's rotate_half convention: element i pairs with
// i + D/2), the rotary table's entry (backend/rotary_kernels.h): one table of cos / sin per call,
// in host scratch as a GPU keeps it in shared memory, then a rotation of each (i, i + D/2) pair of
// every row. f32 rows are read in place with any strides; bf16 / f16 rows are widened into the
// thread's scratch and the results rounded once on store.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/widen_rows.h"
#include "backend/rotary_kernels.h"
#include "core/error.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kParallelGrain = int64_t{1} << 15;

// cos_sin [2, T, D/2]: cos then sin of (position_offset + t) * inv_freq[i], times the rope's
// attention factor, with inv_freq[i] from theta^((2i) / D) scaled as rope.scaling says
// (rope_inv_freq), every step in fp32 as HF's LlamaRotaryEmbedding.
void rotary_table(int64_t seq_len, int64_t head_dim, const RopeParameters& rope,
                  int64_t position_offset, float* cos_sin) {
  const int64_t half = head_dim / 2;
  float* cos_table = cos_sin;
  float* sin_table = cos_sin + seq_len * half;
  const float base = static_cast<float>(rope.theta);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  const bool long_factors = rope_uses_long_factors(rope.scaling, position_offset + seq_len);
  const float attention_factor = rope_attention_factor(rope.scaling);
  for (int64_t i = 0; i < half; ++i) {
    // torch: base ** (arange(0, D, 2).float() / D), all in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[static_cast<size_t>(i)] =
        rope_inv_freq(rope, std::pow(base, exponent), i, head_dim, long_factors);
  }
#pragma omp parallel for if (seq_len * half > kParallelGrain / 8)
  for (int64_t t = 0; t < seq_len; ++t) {
    const float position = static_cast<float>(position_offset + t);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = position * inv_freq[static_cast<size_t>(i)];
      cos_table[t * half + i] = std::cos(angle) * attention_factor;
      sin_table[t * half + i] = std::sin(angle) * attention_factor;
    }
  }
}

// The largest of positions' n values (>= 0, else ValueError), which the table must reach.
int64_t max_position(const int64_t* positions, int64_t n) {
  int64_t top = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (positions[i] < 0) {
      throw ValueError(str_cat("rotary: positions[", i, "] = ", positions[i], " must be >= 0"));
    }
    top = std::max(top, positions[i]);
  }
  return top;
}

// One row of D elements (x's element step `step`) rotated by the table row (c, s) into o.
inline void rotate_row(const float* xr, int64_t step, const float* c, const float* s, float sign,
                       int64_t half, float* o1) {
  float* o2 = o1 + half;
  if (step == 1) {
    const float* x1 = xr;
    const float* x2 = xr + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float sn = sign * s[i];
      o1[i] = x1[i] * c[i] - x2[i] * sn;
      o2[i] = x2[i] * c[i] + x1[i] * sn;
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float sn = sign * s[i];
      const float x1 = xr[i * step], x2 = xr[(i + half) * step];
      o1[i] = x1 * c[i] - x2 * sn;
      o2[i] = x2 * c[i] + x1 * sn;
    }
  }
}

// out [B, H, T, D] contiguous = x [B, H, T, D] (any strides) rotated; `inverse` rotates back (the
// transpose, which is the gradient of the forward rotation): the forward one with -sin.
void rotary(const Tensor& x, const RopeParameters& rope, int64_t position_offset, bool inverse,
            const Tensor& out, const Tensor& positions) {
  ensure_flush_denormal();
  const int64_t heads = x.size(1), seq_len = x.size(2), dim = x.size(3), half = dim / 2;
  const int64_t rows = x.size(0) * heads * seq_len;
  if (positions.defined() && (positions.dtype() != DType::i64 || !positions.is_contiguous() ||
                              positions.shape() != Shape{x.size(0), seq_len})) {
    throw ValueError(str_cat("rotary: positions must be contiguous i64 [", x.size(0), ", ", seq_len,
                             "], not ", dtype_name(positions.dtype()), " ", positions.shape()));
  }
  if (rows == 0 || half == 0) return;
  // The table's rows: positions 0 .. T - 1 past the offset, or up to the largest given.
  const int64_t* given = positions.defined() ? positions.data<int64_t>() : nullptr;
  const int64_t table_rows = given ? max_position(given, positions.numel()) + 1 : seq_len;
  std::vector<float> cos_sin(static_cast<size_t>(2 * table_rows * half));
  rotary_table(table_rows, dim, rope, position_offset, cos_sin.data());
  const float* cos_table = cos_sin.data();
  const float* sin_table = cos_table + table_rows * half;
  const float sign = inverse ? -1.0f : 1.0f;
  const bool f32 = x.dtype() == DType::f32;
  const int64_t step = x.stride(3);
  const char* base = static_cast<const char*>(x.data_ptr());
  const int64_t element = static_cast<int64_t>(x.element_size());
#pragma omp parallel for if (rows * dim > kParallelGrain)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t t = row % seq_len, h = (row / seq_len) % heads, b = row / (seq_len * heads);
    const int64_t first = b * x.stride(0) + h * x.stride(1) + t * x.stride(2);
    float* scratch = thread_scratch(2 * dim);
    const float* xr = reinterpret_cast<const float*>(base + first * element);
    int64_t xr_step = step;
    if (!f32) {
      if (step == 1) {
        convert_to_f32(base + first * element, x.dtype(), scratch, static_cast<size_t>(dim));
      } else {
        for (int64_t i = 0; i < dim; ++i) {
          convert_to_f32(base + (first + i * step) * element, x.dtype(), scratch + i, 1);
        }
      }
      xr = scratch;
      xr_step = 1;
    }
    float* o = span_target(out, row * dim, scratch + dim);
    const int64_t p = given ? given[b * seq_len + t] : t;
    rotate_row(xr, xr_step, cos_table + p * half, sin_table + p * half, sign, half, o);
    store_span(out, row * dim, dim, o);
  }
}

}  // namespace

void fill_rotary_kernels(RotaryKernels& kernels) { kernels.apply = rotary; }

}  // namespace headroom::cpu
