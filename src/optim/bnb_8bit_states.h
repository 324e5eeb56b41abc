// What bitsandbytes' 8-bit optimizers here (AdamW8bit, Lion8bit) share: which parameters they
// take, and the shape of their states (u8 codes in the parameter's shape with an fp32 absmax per
// block of 256, or fp32 below min_8bit_size elements).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace headroom {

// ValueError / NotImplementedError, naming `optimizer` and the parameter, unless `param` is a
// defined, contiguous leaf of dtype f32, bf16 or f16 (bitsandbytes' kernels are built for the
// three: Note [bitsandbytes 16-bit parameters]).
void check_bnb_param(const char* optimizer, const std::string& name, const Tensor& param);

// The absmax entries of a state of `numel` elements: one per block of 256.
int64_t bnb_block_count(int64_t numel);

// A state of `param` as bitsandbytes initializes it, counted as optimizer state: u8 codes 0 in
// its shape (8-bit, every value 0 with absmax 0) or fp32 zeros; and an 8-bit state's absmax.
Tensor bnb_state_zeros(const Tensor& param, bool eight_bit);
Tensor bnb_absmax_zeros(const Tensor& param);

}  // namespace headroom
