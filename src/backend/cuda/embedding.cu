// Embedding on CUDA: the check of the ids (one read back), the row gather in the table's dtype,
// and a deterministic scatter-add backward without atomics: each block owns a range of the
// weight's rows and walks all ids in order, so every gradient element is summed in token order,
// the CPU kernel's order (backend/cpu/embedding.cpp), and the result is the CPU's bit for bit.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/operand.cuh"
#include "backend/cuda/backend_parts.h"
#include "core/error.h"

namespace headroom::cuda {
namespace {

// ---- first_bad_id

// The smallest flat index of a bad id found so far (all ones: none). A static device variable
// rather than a buffer from the allocator: 8 bytes outside the caching allocator's accounting, so
// the check allocates nothing a dry run would have to mirror. The mutex below serialises its use.
__device__ unsigned long long g_first_bad;

template <typename Id>
__global__ void first_bad_kernel(const Id* ids, int64_t count, int64_t num_embeddings) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < count;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t id = static_cast<int64_t>(ids[t]);
    if (id < 0 || id >= num_embeddings) atomicMin(&g_first_bad, static_cast<unsigned long long>(t));
  }
}

std::optional<int64_t> first_bad_id(const Tensor& ids, int64_t num_embeddings) {
  const int64_t count = ids.numel();
  if (count == 0) return std::nullopt;
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  DeviceGuard guard(ids.device().index);
  cudaStream_t stream = current_stream();
  const unsigned long long none = ~0ull;
  HEADROOM_CUDA_CHECK(
      cudaMemcpyToSymbolAsync(g_first_bad, &none, sizeof none, 0, cudaMemcpyHostToDevice, stream));
  if (ids.dtype() == DType::i32) {
    first_bad_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<const int32_t*>(ids.data_ptr()), count, num_embeddings);
  } else {
    first_bad_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<const int64_t*>(ids.data_ptr()), count, num_embeddings);
  }
  check_launch();
  unsigned long long found = none;
  HEADROOM_CUDA_CHECK(cudaMemcpyFromSymbolAsync(&found, g_first_bad, sizeof found, 0,
                                                cudaMemcpyDeviceToHost, stream));
  HEADROOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (found == none) return std::nullopt;
  return static_cast<int64_t>(found);
}

// ---- gather: out[t] = weight[ids[t]], rows copied in units of U (16 bytes when aligned)

template <typename U, typename Id>
__global__ void gather_kernel(const U* weight, const Id* ids, U* out, int64_t count,
                              int64_t row_units) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < count * row_units;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = k / row_units, u = k % row_units;
    out[k] = weight[static_cast<int64_t>(ids[t]) * row_units + u];
  }
}

template <typename U, typename Id>
void launch_gather(const Tensor& weight, const Id* ids, const Tensor& out, int64_t count,
                   int64_t row_bytes) {
  const int64_t row_units = row_bytes / static_cast<int64_t>(sizeof(U));
  gather_kernel<<<blocks_for(count * row_units), kThreads, 0, current_stream()>>>(
      static_cast<const U*>(weight.data_ptr()), ids, static_cast<U*>(out.data_ptr()), count,
      row_units);
}

template <typename Id>
void gather(const Tensor& weight, const Id* ids, const Tensor& out, int64_t count) {
  const int64_t row_bytes = weight.size(1) * static_cast<int64_t>(weight.element_size());
  const auto fits = [&](uintptr_t unit) {
    return reinterpret_cast<uintptr_t>(weight.data_ptr()) % unit == 0 &&
           reinterpret_cast<uintptr_t>(out.data_ptr()) % unit == 0 &&
           static_cast<uintptr_t>(row_bytes) % unit == 0;
  };
  if (fits(16)) {
    launch_gather<uint4>(weight, ids, out, count, row_bytes);
  } else if (fits(4)) {
    launch_gather<uint32_t>(weight, ids, out, count, row_bytes);
  } else if (fits(2)) {
    launch_gather<uint16_t>(weight, ids, out, count, row_bytes);
  } else {
    launch_gather<uint8_t>(weight, ids, out, count, row_bytes);
  }
}

void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  const int64_t count = ids.numel();
  if (count == 0 || weight.size(1) == 0) return;
  DeviceGuard guard(weight.device().index);
  if (ids.dtype() == DType::i32) {
    gather(weight, static_cast<const int32_t*>(ids.data_ptr()), out, count);
  } else {
    gather(weight, static_cast<const int64_t*>(ids.data_ptr()), out, count);
  }
  check_launch();
}

// ---- backward

constexpr int kMaxBackwardThreads = 256;   // also the ids per tile
constexpr int64_t kBackwardBlocks = 1024;  // most blocks: each reads all ids once

// Block b owns weight rows [b * rows_per_block, ...) and zeroes them; thread x owns columns
// x, x + blockDim.x, ... of them. The block reads the ids a tile at a time, lists the tile's
// tokens whose ids it owns in token order (a ballot per warp, then the warps in order), and each
// thread adds those tokens' gradients into its columns in that order. No element has two writers
// and each sum runs in token order, as on the CPU.
template <typename Id>
__global__ void embedding_backward_kernel(Operand grad_out, const Id* ids, float* grad_weight,
                                          int64_t count, int64_t num_embeddings, int64_t dim,
                                          int64_t rows_per_block) {
  __shared__ int64_t tokens[kMaxBackwardThreads];
  __shared__ int64_t rows[kMaxBackwardThreads];
  __shared__ int warp_counts[kMaxBackwardThreads / 32];
  const int64_t first_row = blockIdx.x * rows_per_block;
  const int64_t end_row =
      first_row + rows_per_block < num_embeddings ? first_row + rows_per_block : num_embeddings;
  for (int64_t r = first_row; r < end_row; ++r) {
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) grad_weight[r * dim + c] = 0.0f;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = static_cast<int>(blockDim.x / 32);
  for (int64_t tile = 0; tile < count; tile += blockDim.x) {
    const int64_t t = tile + threadIdx.x;
    int64_t id = -1;
    if (t < count) id = static_cast<int64_t>(ids[t]);
    const bool mine = id >= first_row && id < end_row;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, matched = 0;
    for (int w = 0; w < warps; ++w) {
      if (w < warp) before += warp_counts[w];
      matched += warp_counts[w];
    }
    if (mine) {
      const int slot = before + __popc(ballot & ((1u << lane) - 1u));
      tokens[slot] = t;
      rows[slot] = id;
    }
    __syncthreads();
    for (int m = 0; m < matched; ++m) {
      const int64_t token = tokens[m];
      float* dst = grad_weight + rows[m] * dim;
      for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
        dst[c] += load(grad_out, token * dim + c);
    }
    __syncthreads();  // before the next tile overwrites the list and the counts
  }
}

void embedding_backward(const Tensor& grad_out, const Tensor& ids, const Tensor& grad_weight) {
  const int64_t count = ids.numel();
  const int64_t num_embeddings = grad_weight.size(0), dim = grad_weight.size(1);
  if (num_embeddings == 0 || dim == 0) return;
  if (grad_weight.dtype() != DType::f32) {
    throw ValueError(str_cat("embedding backward: grad_weight must be f32, not ",
                             dtype_name(grad_weight.dtype())));
  }
  check_kernel_dtype("embedding backward", "grad_out", grad_out.dtype());
  const int64_t rows_per_block = (num_embeddings + kBackwardBlocks - 1) / kBackwardBlocks;
  const int64_t blocks = (num_embeddings + rows_per_block - 1) / rows_per_block;
  const int threads =
      static_cast<int>(std::clamp<int64_t>((dim + 31) / 32 * 32, 32, kMaxBackwardThreads));
  DeviceGuard guard(grad_weight.device().index);
  cudaStream_t stream = current_stream();
  float* gw = static_cast<float*>(grad_weight.data_ptr());
  if (ids.dtype() == DType::i32) {
    embedding_backward_kernel<<<static_cast<int>(blocks), threads, 0, stream>>>(
        operand_of(grad_out), static_cast<const int32_t*>(ids.data_ptr()), gw, count,
        num_embeddings, dim, rows_per_block);
  } else {
    embedding_backward_kernel<<<static_cast<int>(blocks), threads, 0, stream>>>(
        operand_of(grad_out), static_cast<const int64_t*>(ids.data_ptr()), gw, count,
        num_embeddings, dim, rows_per_block);
  }
  check_launch();
}

}  // namespace

void fill_embedding_kernels(EmbeddingKernels& kernels) {
  kernels.first_bad_id = first_bad_id;
  kernels.forward = embedding_forward;
  kernels.backward = embedding_backward;
}

}  // namespace headroom::cuda
