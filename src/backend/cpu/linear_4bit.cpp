// The 4-bit linear's CPU kernels (see linear_4bit.h). Loop order: row tiles of x outside, weight
// tiles inside, so x is widened once per row tile and the weight dequantized once per row tile;
// at most one weight tile of kLinear4bitWeightTile rows (forward) or columns (backward) exists.
#include "backend/cpu/linear_4bit.h"

#include <omp.h>

#include <algorithm>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/gemm.h"
#include "core/dtype_convert.h"
#include "core/error.h"

namespace headroom::cpu {

Quant4bitPointers quant_4bit_pointers(const Quant4bitOperand& w) {
  Quant4bitPointers p;
  p.packed = static_cast<const uint8_t*>(w.packed.data_ptr());
  if (w.nested) {
    p.absmax_codes = static_cast<const uint8_t*>(w.absmax.data_ptr());
    p.nested_absmax = static_cast<const float*>(w.nested_absmax.data_ptr());
    p.nested_code = static_cast<const float*>(w.nested_code.data_ptr());
    p.offset = w.offset;
  } else {
    p.absmax = static_cast<const float*>(w.absmax.data_ptr());
  }
  p.type = w.type;
  p.blocksize = w.blocksize;
  return p;
}

namespace {

struct ComputeDtype {
  DType dtype;
  bool bf16, f16;
  explicit ComputeDtype(DType d) : dtype(d), bf16(d == DType::bf16), f16(d == DType::f16) {
    HEADROOM_INTERNAL_ASSERT(d == DType::f32 || bf16 || f16, "linear_4bit: compute dtype ",
                             dtype_name(d), " (the op checks it)");
  }
  bool f32() const { return !bf16 && !f16; }
};

// rows [r0, r0 + count) of a [*, cols] tensor of `dtype` as fp32: the data itself for f32, else
// widened into `scratch`.
const float* rows_f32(const Tensor& t, const ComputeDtype& c, int64_t r0, int64_t count,
                      int64_t cols, float* scratch) {
  const size_t esize = dtype_size(c.dtype);
  const auto* base =
      static_cast<const char*>(t.data_ptr()) + static_cast<size_t>(r0 * cols) * esize;
  if (c.f32()) return reinterpret_cast<const float*>(base);
  convert_to_f32(base, c.dtype, scratch, static_cast<size_t>(count * cols));
  return scratch;
}

// out[r0 + i, c0 + j] = tile[i * ld + j] rounded to the dtype, for a [*, cols] output.
void store_tile(const float* tile, int64_t ld, const Tensor& out, const ComputeDtype& c, int64_t r0,
                int64_t rows, int64_t c0, int64_t width, int64_t cols) {
  auto* base = static_cast<char*>(out.data_ptr());
  const size_t esize = dtype_size(c.dtype);
#pragma omp parallel for schedule(static) if (rows * width > (1 << 15))
  for (int64_t i = 0; i < rows; ++i) {
    convert_from_f32(tile + i * ld, base + static_cast<size_t>((r0 + i) * cols + c0) * esize,
                     c.dtype, static_cast<size_t>(width));
  }
}

void forward(const Tensor& x, const Quant4bitOperand& w, const Tensor& bias,
             const Tensor& workspace, const Tensor& y) {
  const ComputeDtype c(x.dtype());
  const Quant4bitPointers p = quant_4bit_pointers(w);
  const int64_t in = w.cols, out = w.rows, rows = in > 0 ? x.numel() / in : 0;
  const int64_t tile = std::min(out, kLinear4bitWeightTile);
  const int64_t row_tile = std::min(rows, kLinear4bitRowTile);
  HEADROOM_INTERNAL_ASSERT(workspace.numel() >= linear_4bit_forward_workspace(rows, in, out),
                           "linear_4bit_forward: workspace too small");
  float* w_tile = workspace.data<float>();
  float* x_tile = w_tile + tile * in;
  float* y_tile = x_tile + row_tile * in;
  std::vector<float> bias_f32;
  if (bias.defined()) {
    bias_f32.resize(static_cast<size_t>(out));
    convert_to_f32(bias.data_ptr(), c.dtype, bias_f32.data(), bias_f32.size());
  }
  for (int64_t r0 = 0; r0 < rows; r0 += row_tile) {
    const int64_t mr = std::min(row_tile, rows - r0);
    const float* xr = rows_f32(x, c, r0, mr, in, x_tile);
    for (int64_t n0 = 0; n0 < out; n0 += tile) {
      const int64_t nt = std::min(tile, out - n0);
#pragma omp parallel for schedule(static) if (nt * in > (1 << 14))
      for (int64_t i = 0; i < nt * in; ++i) {
        w_tile[i] = round_to_compute(quant_4bit_element(p, n0 * in + i), c.bf16, c.f16);
      }
      // f32 writes straight into y; narrower dtypes go through the fp32 tile, rounded once.
      float* dst = c.f32() ? y.data<float>() + r0 * out + n0 : y_tile;
      const int64_t ld = c.f32() ? out : nt;
      for (int64_t i = 0; i < mr; ++i) {
        for (int64_t j = 0; j < nt; ++j) dst[i * ld + j] = bias.defined() ? bias_f32[n0 + j] : 0.0f;
      }
      if (in > 0) cpu::gemm(false, true, mr, nt, in, 1.0f, xr, in, w_tile, in, 1.0f, dst, ld);
      if (!c.f32()) store_tile(y_tile, nt, y, c, r0, mr, n0, nt, out);
    }
  }
}

void backward_input(const Tensor& grad_y, const Quant4bitOperand& w, const Tensor& workspace,
                    const Tensor& grad_x) {
  const ComputeDtype c(grad_y.dtype());
  const Quant4bitPointers p = quant_4bit_pointers(w);
  const int64_t in = w.cols, out = w.rows, rows = out > 0 ? grad_y.numel() / out : 0;
  const int64_t tile = std::min(in, kLinear4bitWeightTile);
  const int64_t row_tile = std::min(rows, kLinear4bitRowTile);
  HEADROOM_INTERNAL_ASSERT(workspace.numel() >= linear_4bit_backward_workspace(rows, in, out),
                           "linear_4bit_backward_input: workspace too small");
  float* w_tile = workspace.data<float>();
  float* g_tile = w_tile + out * tile;
  float* x_tile = g_tile + row_tile * out;
  for (int64_t r0 = 0; r0 < rows; r0 += row_tile) {
    const int64_t mr = std::min(row_tile, rows - r0);
    const float* gr = rows_f32(grad_y, c, r0, mr, out, g_tile);
    for (int64_t k0 = 0; k0 < in; k0 += tile) {
      const int64_t kt = std::min(tile, in - k0);
#pragma omp parallel for schedule(static) if (out * kt > (1 << 14))
      for (int64_t n = 0; n < out; ++n) {
        for (int64_t j = 0; j < kt; ++j) {
          w_tile[n * kt + j] =
              round_to_compute(quant_4bit_element(p, n * in + k0 + j), c.bf16, c.f16);
        }
      }
      float* dst = c.f32() ? grad_x.data<float>() + r0 * in + k0 : x_tile;
      const int64_t ld = c.f32() ? in : kt;
      if (out > 0) {
        cpu::gemm(false, false, mr, kt, out, 1.0f, gr, out, w_tile, kt, 0.0f, dst, ld);
      } else {
        for (int64_t i = 0; i < mr; ++i) std::fill(dst + i * ld, dst + i * ld + kt, 0.0f);
      }
      if (!c.f32()) store_tile(x_tile, kt, grad_x, c, r0, mr, k0, kt, in);
    }
  }
}

}  // namespace

void fill_quantization_kernels(QuantizationKernels& kernels) {
  kernels.linear_4bit_forward = forward;
  kernels.linear_4bit_backward_input = backward_input;
  fill_quant_4bit_codec_kernels(kernels);
}

}  // namespace headroom::cpu
