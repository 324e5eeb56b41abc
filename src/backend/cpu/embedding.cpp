// Embedding kernels on the CPU, for i32 and i64 ids.
#include "backend/cpu/embedding.h"

#include <cstring>

#include "backend/cpu/backend_parts.h"
#include "backend/embedding_kernels.h"
#include "core/dtype_convert.h"
#include "core/error.h"

namespace headroom::cpu {

namespace {

constexpr int64_t kGrainBytes = 1 << 17;  // bytes copied below which one thread does all
constexpr int64_t kColumnBlock = 64;      // gradient columns per task: 256 bytes, whole cache lines

template <typename Id>
std::optional<int64_t> first_bad(const Id* ids, int64_t count, int64_t num_embeddings) {
  for (int64_t t = 0; t < count; ++t) {
    if (ids[t] < 0 || static_cast<int64_t>(ids[t]) >= num_embeddings) return t;
  }
  return std::nullopt;
}

template <typename Id>
void gather(const char* src, const Id* ids, char* dst, int64_t count, size_t row_bytes) {
#pragma omp parallel for if (count * static_cast <int64_t>(row_bytes) > kGrainBytes) \
    schedule(static)
  for (int64_t t = 0; t < count; ++t) {
    std::memcpy(dst + t * row_bytes, src + static_cast<size_t>(ids[t]) * row_bytes, row_bytes);
  }
}

// Each task owns a block of columns and walks the tokens in order: no two threads touch one
// element, and every element's sum is taken in token order, whatever the thread count. bf16 /
// f16 gradient rows are widened one block (kColumnBlock values) at a time on the stack.
template <typename Id>
void scatter_add(const char* grad_out, DType dtype, const Id* ids, float* grad_weight,
                 int64_t count, int64_t num_embeddings, int64_t dim) {
  const bool parallel = (count + num_embeddings) * dim > (1 << 15);
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t r = 0; r < num_embeddings; ++r) {
    std::memset(grad_weight + r * dim, 0, static_cast<size_t>(dim) * sizeof(float));
  }
  const int64_t element_size = static_cast<int64_t>(dtype_size(dtype));
  const int64_t blocks = (dim + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kColumnBlock;
    const int64_t len = dim - begin < kColumnBlock ? dim - begin : kColumnBlock;
    alignas(64) float widened[kColumnBlock];
    for (int64_t t = 0; t < count; ++t) {
      float* dst = grad_weight + static_cast<int64_t>(ids[t]) * dim + begin;
      const char* row = grad_out + (t * dim + begin) * element_size;
      const float* src = reinterpret_cast<const float*>(row);
      if (dtype != DType::f32) {
        convert_to_f32(row, dtype, widened, static_cast<size_t>(len));
        src = widened;
      }
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) dst[i] += src[i];
    }
  }
}

void check_ids(const char* entry, const Tensor& ids) {
  if ((ids.dtype() != DType::i32 && ids.dtype() != DType::i64) || !ids.is_contiguous()) {
    throw ValueError(str_cat(entry, ": ids must be contiguous i32 or i64, not ",
                             dtype_name(ids.dtype()), " with strides ", ids.strides()));
  }
}

}  // namespace

std::optional<int64_t> embedding_first_bad_id(const Tensor& ids, int64_t num_embeddings) {
  check_ids("embedding first_bad_id", ids);
  if (ids.dtype() == DType::i32) return first_bad(ids.data<int32_t>(), ids.numel(), num_embeddings);
  return first_bad(ids.data<int64_t>(), ids.numel(), num_embeddings);
}

void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  const char* entry = "embedding forward";
  check_ids(entry, ids);
  if (!weight.is_contiguous() || !out.is_contiguous() || out.dtype() != weight.dtype() ||
      out.numel() != ids.numel() * weight.size(1)) {
    throw ValueError(str_cat(entry, ": weight ", weight.shape(), " and out ", out.shape(),
                             " must be contiguous in one dtype, out with a row per id"));
  }
  const char* src = static_cast<const char*>(weight.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const size_t row_bytes = static_cast<size_t>(weight.size(1)) * weight.element_size();
  if (ids.dtype() == DType::i32) {
    gather(src, ids.data<int32_t>(), dst, ids.numel(), row_bytes);
  } else {
    gather(src, ids.data<int64_t>(), dst, ids.numel(), row_bytes);
  }
}

void embedding_backward(const Tensor& grad_out, const Tensor& ids, const Tensor& grad_weight) {
  const char* entry = "embedding backward";
  check_ids(entry, ids);
  const int64_t num_embeddings = grad_weight.size(0), dim = grad_weight.size(1);
  if (grad_weight.dtype() != DType::f32 || !grad_weight.is_contiguous()) {
    throw ValueError(str_cat(entry, ": grad_weight must be contiguous f32, not ",
                             dtype_name(grad_weight.dtype()), " with strides ",
                             grad_weight.strides()));
  }
  const DType dtype = grad_out.dtype();
  if ((dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) ||
      !grad_out.is_contiguous() || grad_out.numel() != ids.numel() * dim) {
    throw ValueError(str_cat(entry, ": grad_out must be contiguous f32, bf16 or f16 with a row of ",
                             dim, " per id, not ", dtype_name(dtype), " ", grad_out.shape()));
  }
  const char* g = static_cast<const char*>(grad_out.data_ptr());
  float* gw = grad_weight.data<float>();
  if (ids.dtype() == DType::i32) {
    scatter_add(g, dtype, ids.data<int32_t>(), gw, ids.numel(), num_embeddings, dim);
  } else {
    scatter_add(g, dtype, ids.data<int64_t>(), gw, ids.numel(), num_embeddings, dim);
  }
}

void fill_embedding_kernels(EmbeddingKernels& kernels) {
  kernels.first_bad_id = embedding_first_bad_id;
  kernels.forward = embedding_forward;
  kernels.backward = embedding_backward;
}

}  // namespace headroom::cpu
