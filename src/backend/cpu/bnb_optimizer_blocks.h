// What bitsandbytes' optimizer kernels on the CPU (adamw_8bit.cpp, lion_8bit.cpp) share: the walk
// over blocks of 256 with the gradient and the parameter seen as fp32, the parameter's roundings
// into its own dtype, and the two dynamic maps. For the CPU kernel files only (OpenMP).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/blockwise_quant.h"
#include "core/dtype.h"
#include "core/dtype_convert.h"

namespace headroom::cpu {

// values[i] rounded to nearest-even in `dtype` and widened back (nothing for f32): what
// bitsandbytes' kernels do when they assign an fp32 result to a register of the parameter's type
// T in the middle of an update (See Note [bitsandbytes 16-bit parameters]). count <= 256.
inline void bnb_round_through(float* values, int64_t count, DType dtype) {
  if (dtype == DType::f32) return;
  alignas(64) uint16_t narrow[256];
  convert_from_f32(values, narrow, dtype, static_cast<size_t>(count));
  convert_to_f32(narrow, dtype, values, static_cast<size_t>(count));
}

// One block of kAdam8bitBlockSize elements of a parameter and its gradient, seen as fp32.
struct BnbBlock {
  int64_t index;      // the block's number: its absmax entry
  int64_t begin;      // its first element
  int64_t count;      // its elements (the last block may be short)
  const float* grad;  // the gradient of the block in fp32: in place, or widened
  float* param;       // the parameter of the block in fp32, to update in place
};

// fn(block) for each block of the n elements of `param` and `grad` (f32, bf16 or f16), as
// bitsandbytes' kernels load a block of T: a 16-bit parameter is widened before fn and rounded to
// nearest into its dtype after it (f32 ones are updated in place), a 16-bit gradient widened. No
// fp32 copy of a whole parameter is made. OpenMP over blocks for 128 blocks and more, one thread
// per 64; each element is updated by one call, so results do not depend on the thread count.
template <typename Fn>
void for_each_bnb_block(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                        int64_t n, const Fn& fn) {
  constexpr int64_t kBlock = kAdam8bitBlockSize;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int threads = static_cast<int>(std::clamp<int64_t>(blocks / 64, 1, omp_get_max_threads()));
  const size_t param_size = dtype_size(param_dtype), grad_size = dtype_size(grad_dtype);
#pragma omp parallel for schedule(static) num_threads(threads) if (blocks >= 128)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    alignas(64) float grad_buffer[kBlock], param_buffer[kBlock];
    const float* g = static_cast<const float*>(grad) + begin;
    if (grad_dtype != DType::f32) {
      convert_to_f32(static_cast<const char*>(grad) + begin * grad_size, grad_dtype, grad_buffer,
                     static_cast<size_t>(count));
      g = grad_buffer;
    }
    char* param_bytes = static_cast<char*>(param) + begin * param_size;
    float* p = static_cast<float*>(param) + begin;
    if (param_dtype != DType::f32) {
      convert_to_f32(param_bytes, param_dtype, param_buffer, static_cast<size_t>(count));
      p = param_buffer;
    }
    fn(BnbBlock{.index = b, .begin = begin, .count = count, .grad = g, .param = p});
    if (param_dtype != DType::f32) {
      convert_from_f32(p, param_bytes, param_dtype, static_cast<size_t>(count));
    }
  }
}

// The dynamic maps of the 8-bit states (bitsandbytes' "dynamic" and "udynamic"), made once.
inline const QuantizationMap& bnb_signed_map() {
  static const QuantizationMap map = create_dynamic_map(true);
  return map;
}
inline const QuantizationMap& bnb_unsigned_map() {
  static const QuantizationMap map = create_dynamic_map(false);
  return map;
}

}  // namespace headroom::cpu
