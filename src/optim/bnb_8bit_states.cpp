// The parameter checks and state allocation of bitsandbytes' 8-bit optimizers (bnb_8bit_states.h).
#include "optim/bnb_8bit_states.h"

#include "backend/adamw_8bit_kernels.h"
#include "core/error.h"
#include "memory/memory_category.h"

namespace headroom {

void check_bnb_param(const char* optimizer, const std::string& name, const Tensor& param) {
  if (!param.defined()) {
    throw ValueError(str_cat(optimizer, ": parameter '", name, "' is undefined"));
  }
  const DType dtype = param.dtype();
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
    throw NotImplementedError(str_cat(optimizer, ": parameter '", name, "' is ", dtype_name(dtype),
                                      "; only f32, bf16 and f16 parameters are supported"));
  }
  if (!param.is_leaf()) {
    throw ValueError(str_cat(optimizer, ": can't optimize a non-leaf tensor ('", name, "')"));
  }
  if (!param.is_contiguous()) {
    throw ValueError(str_cat(optimizer, ": parameter '", name, "' is not contiguous"));
  }
}

int64_t bnb_block_count(int64_t numel) {
  return (numel + kAdam8bitBlockSize - 1) / kAdam8bitBlockSize;
}

Tensor bnb_state_zeros(const Tensor& param, bool eight_bit) {
  MemoryCategoryScope states(MemoryCategory::optimizer_states);
  return Tensor::zeros(param.shape(), eight_bit ? DType::u8 : DType::f32, param.device());
}

Tensor bnb_absmax_zeros(const Tensor& param) {
  MemoryCategoryScope states(MemoryCategory::optimizer_states);
  return Tensor::zeros({bnb_block_count(param.numel())}, DType::f32, param.device());
}

}  // namespace headroom
