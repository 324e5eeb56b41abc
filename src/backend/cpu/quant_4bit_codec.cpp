// The 4-bit codec's CPU entries of the quantization table (backend/quantization_kernels.h):
// quantize, double-quantize and dequantize on the tensors of the CPU device, through the codec
// of backend/cpu/quant_4bit.h and blockwise_quant.h.
#include <algorithm>
#include <vector>

#include "backend/cpu/backend_parts.h"
#include "backend/cpu/blockwise_quant.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/linear_4bit.h"
#include "backend/cpu/quant_4bit.h"
#include "backend/cpu/torch_mean.h"
#include "backend/quantization_kernels.h"
#include "core/dtype_convert.h"

namespace headroom::cpu {

namespace {

void quantize_4bit_entry(const Tensor& weight, Quant4bitType type, int64_t blocksize,
                         const Tensor& packed, const Tensor& absmax) {
  ensure_flush_denormal();
  const int64_t n = weight.numel();
  // A bf16 / f16 weight is widened first (exactly), in host memory of the kernel's own: the
  // CUDA kernel widens each value as it reads it, into nothing.
  std::vector<float> widened;
  const float* values = weight.dtype() == DType::f32 ? weight.data<float>() : nullptr;
  if (!values) {
    widened.resize(static_cast<size_t>(n));
    convert_to_f32(weight.data_ptr(), weight.dtype(), widened.data(), widened.size());
    values = widened.data();
  }
  quantize_4bit(type, values, n, blocksize, static_cast<uint8_t*>(packed.data_ptr()),
                absmax.data<float>());
}

void quantize_absmax_nested(const Tensor& absmax, const Tensor& offset, const Tensor& codes,
                            const Tensor& nested_absmax, const Tensor& nested_code) {
  ensure_flush_denormal();
  float* a = absmax.data<float>();
  const int64_t blocks = absmax.numel();
  const float mean = torch_mean_f32(a, blocks);
  *offset.data<float>() = mean;
  for (int64_t b = 0; b < blocks; ++b) a[b] -= mean;
  // bitsandbytes builds its map on torch 2's linspace (fused_linspace: blockwise_quant.h).
  const QuantizationMap map = create_dynamic_map(/*is_signed=*/true, 7, 8, /*fused_linspace=*/true);
  std::copy(map.begin(), map.end(), nested_code.data<float>());
  quantize_blockwise_lut(map, a, blocks, kQuant4bitNestedBlocksize,
                         static_cast<uint8_t*>(codes.data_ptr()), nested_absmax.data<float>());
}

void dequantize_4bit_entry(const Quant4bitOperand& w, const Tensor& out) {
  const Quant4bitPointers p = quant_4bit_pointers(w);
  const int64_t n = w.rows * w.cols;
  if (out.dtype() == DType::f32) {
    float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) o[i] = quant_4bit_element(p, i);
    return;
  }
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  char* base = static_cast<char*>(out.data_ptr());
  const auto size = static_cast<int64_t>(out.element_size());
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t c = 0; c < chunks; ++c) {
    float buffer[kChunk];
    const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
    for (int64_t i = 0; i < len; ++i) buffer[i] = quant_4bit_element(p, begin + i);
    convert_from_f32(buffer, base + begin * size, out.dtype(), static_cast<size_t>(len));
  }
}

}  // namespace

void fill_quant_4bit_codec_kernels(QuantizationKernels& kernels) {
  kernels.quantize_4bit = quantize_4bit_entry;
  kernels.quantize_absmax_nested = quantize_absmax_nested;
  kernels.dequantize_4bit = dequantize_4bit_entry;
}

}  // namespace headroom::cpu
