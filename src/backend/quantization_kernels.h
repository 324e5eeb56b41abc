// The kernel table of the `quantization` op family: the 4-bit linear of QLoRA's frozen base
// (quant/linear_4bit.h), one table per device type with named entries, as ggml's
// ggml-backend-impl.h declares its interface. Every entry is optional: a device without one
// answers NotImplementedError naming the op, the entry and the device (need_quantization_kernel);
// the meta device has no table and runs nothing, while the op still allocates every buffer.
//
// The op allocates every output and workspace (sizes from the shape functions below, equal on
// all devices), so a dry run on the meta device plans the same bytes (DESIGN principle 7).
// Kernels read and write the tensors' own dtypes; the weight is dequantized tile by tile inside
// the kernel, never as a whole matrix.
#pragma once

#include <cstdint>

#include "backend/cpu/quant_4bit.h"
#include "core/device.h"
#include "core/tensor.h"

namespace headroom {

// A 4-bit weight [rows, cols] (out, in) as the kernels read it: bitsandbytes' packed codes (any
// storage dtype; read as bytes) and per-block absmax, either f32 [blocks] or, double-quantized,
// u8 codes with absmax(b) = nested_code[code_b] * nested_absmax[b / 256] + offset.
struct Quant4bitOperand {
  Tensor packed;
  Tensor absmax;
  Tensor nested_absmax;  // undefined unless nested
  Tensor nested_code;    // undefined unless nested
  float offset = 0.0f;
  bool nested = false;
  cpu::Quant4bitType type = cpu::Quant4bitType::nf4;
  int64_t blocksize = 64;
  int64_t rows = 0, cols = 0;
};

// Tiles of the CPU kernels: output features (forward) or input features (backward) per
// dequantized weight tile, and rows of x per widened tile.
inline constexpr int64_t kLinear4bitWeightTile = 128;
inline constexpr int64_t kLinear4bitRowTile = 256;

// f32 elements of the workspaces the op allocates for rows x [rows, in] @ W[out, in]^T.
int64_t linear_4bit_forward_workspace(int64_t rows, int64_t in, int64_t out);
int64_t linear_4bit_backward_workspace(int64_t rows, int64_t in, int64_t out);

struct QuantizationKernels {
  // y [rows, out] = x [rows, in] @ dequant(w)^T (+ bias [out]). x, bias and y share the compute
  // dtype (f32, bf16, f16); each weight element is code * absmax in fp32 rounded to it, products
  // are summed in fp32 and y rounded once. workspace: f32 [linear_4bit_forward_workspace].
  // (optional)
  void (*linear_4bit_forward)(const Tensor& x, const Quant4bitOperand& w, const Tensor& bias,
                              const Tensor& workspace, const Tensor& y) = nullptr;
  // grad_x [rows, in] = grad_y [rows, out] @ dequant(w), the same numerics; the weight gets no
  // gradient. workspace: f32 [linear_4bit_backward_workspace]. (optional)
  void (*linear_4bit_backward_input)(const Tensor& grad_y, const Quant4bitOperand& w,
                                     const Tensor& workspace, const Tensor& grad_x) = nullptr;
};

// Filled at start-up by each backend's kernel file (backend/cpu/linear_4bit.cpp,
// backend/cuda/quantization.cu).
QuantizationKernels& mutable_quantization_kernels(DeviceType type);

// The table of `type`, or null when no backend registered one (the meta device).
const QuantizationKernels* find_quantization_kernels(DeviceType type);

[[noreturn]] void throw_missing_quantization_kernel(const char* name, const char* op,
                                                   Device device);

// `entry` itself, or NotImplementedError "<op>: the quantization kernel <name> is not
// implemented for <device>".
template <typename F>
F need_quantization_kernel(F entry, const char* name, const char* op, Device device) {
  if (!entry) throw_missing_quantization_kernel(name, op, device);
  return entry;
}

}  // namespace headroom
