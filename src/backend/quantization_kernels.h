// The quantized tensors' kernel table (Note [Kernel tables] in backend/kernel_table.h): 4-bit (NF4
// / FP4) dequantization and linears on quantized weights. No entry yet: the quant/ layer declares
// them here as it adds its kernels.
#pragma once

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct QuantizationKernels {
  static constexpr const char* kName = "quantization";
};

}  // namespace headroom
