// The calling thread's current CUDA stream.
#include "backend/cuda/cuda_stream.h"

#include "core/dtype.h"
#include "core/error.h"

namespace headroom::cuda {
namespace {

thread_local cudaStream_t t_current_stream = nullptr;  // the legacy default stream

}  // namespace

cudaStream_t current_stream() { return t_current_stream; }

StreamGuard::StreamGuard(cudaStream_t stream) : previous_(t_current_stream) {
  t_current_stream = stream;
}

StreamGuard::~StreamGuard() { t_current_stream = previous_; }

void check_kernel_dtype(const char* op, const char* argument, DType dtype) {
  if (dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16) return;
  throw ValueError(str_cat(op, ": ", argument, " has dtype ", dtype_name(dtype),
                           "; the CUDA kernels take f32, bf16 or f16"));
}

}  // namespace headroom::cuda
