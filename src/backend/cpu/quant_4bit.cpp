// bitsandbytes' blockwise 4-bit codec on the CPU (see quant_4bit.h).
#include "backend/cpu/quant_4bit.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace headroom::cpu {

// Note [4-bit quantization as bitsandbytes' CPU path]
// bitsandbytes 0.50 quantizes on the CPU with torch ops (backends/default/ops.py):
// - the full blocks: absmax = max |x| as is, scaled = clamp(x * (1 / max(absmax, 1e-38)), -1, 1),
//   a reciprocal multiply;
// - the short last block: absmax = max(max |x|, 1e-38) (stored clamped), scaled = clamp(x / absmax,
//   -1, 1), a true division;
// - the code: torch.bucketize(scaled, midpoints) over the code sorted by torch.argsort, i.e. the
//   number of fp32 midpoints (a + b) / 2 strictly below the value, so a value on a midpoint takes
//   the lower code; FP4 maps the sorted index back through argsort's order. FP4's two zeros
//   (codes 0 and 8, both +0.0) tie; torch's argsort puts code 0 first (kFp4SortedOrder), so values
//   in
//   (-0.0026, 0] get code 0 and (0, 0.0026] code 8, as tools/gen_quant4bit_golden.py records.
// A block of zeros scales to 0 here without the 1e-38 reciprocal, which flush-to-zero
// (backend/cpu/denormals.h) would turn into inf * 0; bitsandbytes gets 0 there too. Under
// flush-to-zero, a block whose values are all subnormal reads as zeros (bitsandbytes, without
// it, scales them up by 1e38): the one case that differs. The CUDA kernel (quantization.cu)
// runs the same quantize_4bit_block without flushing, as bitsandbytes.

void quantize_4bit(Quant4bitType type, const float* in, int64_t n, int64_t block_size,
                   uint8_t* packed, float* absmax) {
  HEADROOM_INTERNAL_ASSERT(block_size > 0 && block_size % 2 == 0, "quantize_4bit: block_size ",
                           block_size, " must be even and > 0");
  const Quant4bitSortedCode sorted = quant_4bit_sorted_code(type);
  const int64_t blocks = (n + block_size - 1) / block_size;
  const auto at = [in](int64_t i) { return in[i]; };
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    quantize_4bit_block(sorted, at, n, block_size, b, packed, absmax);
  }
}

void dequantize_4bit(Quant4bitType type, const uint8_t* packed, const float* absmax, int64_t n,
                     int64_t block_size, float* out) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    out[i] = quant_4bit_code_value(type, unpack_4bit(packed, i)) * absmax[i / block_size];
  }
}

}  // namespace headroom::cpu
