// CPU kernels behind the Tensor class: fill, strided copy with dtype conversion, arange and
// Philox draws, the CPU's DeviceKernels (registered by backend/cpu/backend.cpp). Rows that are
// contiguous in both tensors go through the bulk (vectorised) conversions; large tensors split
// rows over OpenMP threads.
#include <algorithm>
#include <cstring>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/strided_loop.h"
#include "core/device_kernels.h"
#include "core/dtype_convert.h"
#include "core/element_io.h"
#include "core/tensor.h"

namespace headroom::cpu {
namespace {

constexpr int64_t kParallelGrain = 1 << 15;  // elements per thread below which we stay serial
constexpr int64_t kChunk = 1024;             // f32 staging buffer for converting rows

char* element(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset * static_cast<int64_t>(t.element_size());
}

// Copies one row of n elements, converting dtypes.
void copy_row(char* dst, DType dst_dtype, int64_t dst_step, const char* src, DType src_dtype,
              int64_t src_step, int64_t n, Overflow overflow) {
  const int64_t dsize = static_cast<int64_t>(dtype_size(dst_dtype));
  const int64_t ssize = static_cast<int64_t>(dtype_size(src_dtype));
  if (dst_dtype == src_dtype) {
    if (dst_step == 1 && src_step == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n * dsize));
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + i * dst_step * dsize, src + i * src_step * ssize, dsize);
    return;
  }
  if (!is_floating(dst_dtype) && !is_floating(src_dtype)) {
    for (int64_t i = 0; i < n; ++i) {
      store_from_i64(dst + i * dst_step * dsize, dst_dtype,
                     load_as_i64(src + i * src_step * ssize, src_dtype));
    }
    return;
  }
  // Contiguous rows with one side in f32 need no staging buffer.
  if (src_step == 1 && dst_step == 1 && is_floating(src_dtype) && is_floating(dst_dtype)) {
    if (src_dtype == DType::f32) {
      convert_from_f32(reinterpret_cast<const float*>(src), dst, dst_dtype, static_cast<size_t>(n),
                       overflow);
      return;
    }
    if (dst_dtype == DType::f32) {
      convert_to_f32(src, src_dtype, reinterpret_cast<float*>(dst), static_cast<size_t>(n));
      return;
    }
  }
  float buffer[kChunk];
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t m = std::min(kChunk, n - start);
    const char* s = src + start * src_step * ssize;
    char* d = dst + start * dst_step * dsize;
    if (src_step == 1 && is_floating(src_dtype)) {
      convert_to_f32(s, src_dtype, buffer, static_cast<size_t>(m));
    } else {
      for (int64_t i = 0; i < m; ++i) buffer[i] = load_as_f32(s + i * src_step * ssize, src_dtype);
    }
    if (dst_step == 1 && is_floating(dst_dtype)) {
      convert_from_f32(buffer, d, dst_dtype, static_cast<size_t>(m), overflow);
    } else {
      for (int64_t i = 0; i < m; ++i)
        store_from_f32(d + i * dst_step * dsize, dst_dtype, buffer[i], overflow);
    }
  }
}

// Calls fn(dst_offset, src_offset, n) for pieces of the rows of dst and src (offsets in
// elements): whole rows split over OpenMP threads, or one long row cut into pieces so a large
// contiguous operation still uses every thread.
template <typename Fn>
void for_each_row_piece(const StridedRows& rows, Fn fn) {
  if (rows.rows == 1) {
    const int64_t pieces =
        std::max<int64_t>(1, std::min<int64_t>(64, rows.row_length / kParallelGrain));
    const int64_t per = (rows.row_length + pieces - 1) / pieces;
#pragma omp parallel for if (pieces > 1)
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t begin = p * per, n = std::min(per, rows.row_length - begin);
      if (n > 0) fn(begin * rows.dst_step, begin * rows.src_step, n);
    }
    return;
  }
#pragma omp parallel for if (rows.rows * rows.row_length > kParallelGrain)
  for (int64_t r = 0; r < rows.rows; ++r) {
    int64_t d, s;
    rows.row_start(r, &d, &s);
    fn(d, s, rows.row_length);
  }
}

void copy_kernel(const Tensor& dst, const Tensor& src, Overflow overflow) {
  const StridedRows rows = make_strided_rows(dst, &src);
  char* dst_base = element(dst, 0);
  const char* src_base = element(src, 0);
  const int64_t dsize = static_cast<int64_t>(dst.element_size());
  const int64_t ssize = static_cast<int64_t>(src.element_size());
  for_each_row_piece(rows, [&](int64_t d, int64_t s, int64_t n) {
    copy_row(dst_base + d * dsize, dst.dtype(), rows.dst_step, src_base + s * ssize, src.dtype(),
             rows.src_step, n, overflow);
  });
}

// dst += src in fp32, row by row; dst is contiguous (autograd's .grad accumulation).
void accumulate_row(char* dst, DType dst_dtype, const char* src, DType src_dtype, int64_t src_step,
                    int64_t n) {
  const int64_t dsize = static_cast<int64_t>(dtype_size(dst_dtype));
  const int64_t ssize = static_cast<int64_t>(dtype_size(src_dtype));
  if (dst_dtype == DType::f32 && src_dtype == DType::f32 && src_step == 1) {
    float* d = reinterpret_cast<float*>(dst);
    const float* s = reinterpret_cast<const float*>(src);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    return;
  }
  float a[kChunk], b[kChunk];
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t m = std::min(kChunk, n - start);
    char* d = dst + start * dsize;
    const char* s = src + start * src_step * ssize;
    convert_to_f32(d, dst_dtype, a, static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) b[i] = load_as_f32(s + i * src_step * ssize, src_dtype);
    for (int64_t i = 0; i < m; ++i) a[i] += b[i];
    convert_from_f32(a, d, dst_dtype, static_cast<size_t>(m), Overflow::ieee);
  }
}

void accumulate_kernel(const Tensor& dst, const Tensor& src) {
  const StridedRows rows = make_strided_rows(dst, &src);
  char* dst_base = element(dst, 0);
  const char* src_base = element(src, 0);
  const int64_t dsize = static_cast<int64_t>(dst.element_size());
  const int64_t ssize = static_cast<int64_t>(src.element_size());
  for_each_row_piece(rows, [&](int64_t d, int64_t s, int64_t n) {
    accumulate_row(dst_base + d * dsize, dst.dtype(), src_base + s * ssize, src.dtype(),
                   rows.src_step, n);
  });
}

template <typename Word>
void fill_words(char* base, int64_t step, int64_t n, const void* pattern) {
  Word w;
  std::memcpy(&w, pattern, sizeof(Word));
  Word* p = reinterpret_cast<Word*>(base);
  if (step == 1) {
    std::fill(p, p + n, w);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i * step] = w;
  }
}

void fill_kernel(const Tensor& dst, double value) {
  alignas(8) unsigned char pattern[8];
  store_from_double(pattern, dst.dtype(), value);
  const StridedRows rows = make_strided_rows(dst, nullptr);
  const int64_t size = static_cast<int64_t>(dst.element_size());
  char* base = element(dst, 0);
  const int64_t total = rows.rows * rows.row_length;
  const int64_t pieces =
      rows.rows == 1 ? std::max<int64_t>(1, std::min<int64_t>(64, total / kParallelGrain)) : 1;
  const int64_t per = (rows.row_length + pieces - 1) / pieces;
  auto fill_row = [&](char* row, int64_t n) {
    switch (size) {
      case 1:
        fill_words<uint8_t>(row, rows.dst_step, n, pattern);
        break;
      case 2:
        fill_words<uint16_t>(row, rows.dst_step, n, pattern);
        break;
      case 4:
        fill_words<uint32_t>(row, rows.dst_step, n, pattern);
        break;
      default:
        fill_words<uint64_t>(row, rows.dst_step, n, pattern);
        break;
    }
  };
  if (rows.rows == 1) {
#pragma omp parallel for if (pieces > 1)
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t begin = p * per, n = std::min(per, rows.row_length - begin);
      if (n > 0) fill_row(base + begin * rows.dst_step * size, n);
    }
    return;
  }
#pragma omp parallel for if (total > kParallelGrain)
  for (int64_t r = 0; r < rows.rows; ++r) {
    int64_t d, unused;
    rows.row_start(r, &d, &unused);
    fill_row(base + d * size, rows.row_length);
  }
}

void arange_kernel(const Tensor& dst, double start, double step) {
  char* base = element(dst, 0);
  const int64_t size = static_cast<int64_t>(dst.element_size());
  const int64_t n = dst.numel();
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    store_from_double(base + i * size, dst.dtype(), start + static_cast<double>(i) * step);
  }
}

// Draws into a contiguous floating tensor block by block; see Note [Philox stream layout].
template <typename Draw>
void draw_kernel(const Tensor& dst, Draw draw) {
  const int64_t n = dst.numel();
  const int64_t size = static_cast<int64_t>(dst.element_size());
  char* base = element(dst, 0);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    float buffer[kChunk];
    const int64_t begin = c * kChunk, m = std::min(kChunk, n - begin);
    for (int64_t i = 0; i < m; ++i) buffer[i] = draw(static_cast<uint64_t>(begin + i));
    convert_from_f32(buffer, base + begin * size, dst.dtype(), static_cast<size_t>(m));
  }
}

void uniform_kernel(const Tensor& dst, PhiloxState rng, double low, double high) {
  const float lo = static_cast<float>(low), hi = static_cast<float>(high);
  draw_kernel(dst, [&](uint64_t i) { return philox_uniform(rng.seed, rng.offset, i, lo, hi); });
}

void normal_kernel(const Tensor& dst, PhiloxState rng, double mean, double std) {
  const float m = static_cast<float>(mean), s = static_cast<float>(std);
  draw_kernel(dst, [&](uint64_t i) { return philox_normal(rng.seed, rng.offset, i, m, s); });
}

}  // namespace

const DeviceKernels& tensor_kernels() {
  static const DeviceKernels kernels = [] {
    DeviceKernels k;
    k.fill = fill_kernel;
    k.copy = copy_kernel;
    k.accumulate = accumulate_kernel;
    k.arange = arange_kernel;
    k.uniform = uniform_kernel;
    k.normal = normal_kernel;
    k.has_op_kernels = true;
    return k;
  }();
  return kernels;
}

}  // namespace headroom::cpu
