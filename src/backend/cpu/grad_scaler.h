// GradScaler's fused pass over one gradient (torch's _amp_foreach_non_finite_check_and_unscale_):
// look for inf / NaN and multiply by 1 / scale, reading and writing each element once.
// amp/grad_scaler.cpp drives it.
#pragma once

#include <cstdint>

#include "core/float_formats.h"

namespace headroom::cpu {

// Multiplies n contiguous values in place by inv_scale in fp32 (rounded back to the array's dtype)
// and returns whether any of them was inf or NaN before. The check looks at the input, as torch's
// kernel does, so a product that overflows is not reported. With inv_scale == 1 the array is only
// read: torch skips the multiply there too, which keeps values the flush-to-zero mode would lose.
bool non_finite_check_and_unscale(float* data, int64_t n, float inv_scale);
bool non_finite_check_and_unscale(BFloat16* data, int64_t n, float inv_scale);
bool non_finite_check_and_unscale(Half* data, int64_t n, float inv_scale);

}  // namespace headroom::cpu
