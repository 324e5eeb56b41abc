// Embedding kernels, instantiated for i32 and i64 ids.
#include "backend/cpu/embedding.h"

#include <cstring>

namespace headroom::cpu {

namespace {
constexpr int64_t kGrainBytes = 1 << 17;  // bytes copied below which one thread does all
constexpr int64_t kColumnBlock = 64;      // gradient columns per task: 256 bytes, whole cache lines
}  // namespace

template <typename Id>
int64_t first_bad_id(const Id* ids, int64_t count, int64_t num_embeddings) {
  for (int64_t t = 0; t < count; ++t) {
    if (ids[t] < 0 || static_cast<int64_t>(ids[t]) >= num_embeddings) return t;
  }
  return -1;
}

template <typename Id>
void embedding_gather(const void* weight, const Id* ids, void* out, int64_t count,
                      size_t row_bytes) {
  const char* src = static_cast<const char*>(weight);
  char* dst = static_cast<char*>(out);
#pragma omp parallel for if (count * static_cast<int64_t>(row_bytes) > kGrainBytes) schedule(static)
  for (int64_t t = 0; t < count; ++t) {
    std::memcpy(dst + t * row_bytes, src + static_cast<size_t>(ids[t]) * row_bytes, row_bytes);
  }
}

template <typename Id>
void embedding_backward(const float* grad_out, const Id* ids, float* grad_weight, int64_t count,
                        int64_t num_embeddings, int64_t dim) {
  const bool parallel = (count + num_embeddings) * dim > (1 << 15);
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t r = 0; r < num_embeddings; ++r) {
    std::memset(grad_weight + r * dim, 0, static_cast<size_t>(dim) * sizeof(float));
  }
  // Each task owns a block of columns and walks the tokens in order: no two threads touch one
  // element, and every element's sum is taken in token order, whatever the thread count.
  const int64_t blocks = (dim + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kColumnBlock;
    const int64_t len = dim - begin < kColumnBlock ? dim - begin : kColumnBlock;
    for (int64_t t = 0; t < count; ++t) {
      float* dst = grad_weight + static_cast<int64_t>(ids[t]) * dim + begin;
      const float* src = grad_out + t * dim + begin;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) dst[i] += src[i];
    }
  }
}

#define HEADROOM_EMBEDDING_INSTANTIATE(Id)                                                     \
  template int64_t first_bad_id<Id>(const Id*, int64_t, int64_t);                             \
  template void embedding_gather<Id>(const void*, const Id*, void*, int64_t, size_t);         \
  template void embedding_backward<Id>(const float*, const Id*, float*, int64_t, int64_t, int64_t);
HEADROOM_EMBEDDING_INSTANTIATE(int32_t)
HEADROOM_EMBEDDING_INSTANTIATE(int64_t)
#undef HEADROOM_EMBEDDING_INSTANTIATE

}  // namespace headroom::cpu
