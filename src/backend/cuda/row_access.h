// What the row kernels (norm.cu, cross_entropy.cu) share: 16-byte packed loads and stores of a
// row's elements, the alignment test that decides whether a row may be read that way, and the
// fixed-order warp sum their reductions build on.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_launch.h"

namespace headroom::cuda {

inline constexpr int kWarpSize = 32;

// N consecutive elements of T, moved with one load or store when N * sizeof(T) is 16 bytes.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Elements of T in one 16-byte load.
template <typename T>
inline constexpr int kPackOf = static_cast<int>(16 / sizeof(T));

// The pack-th group of N elements from `row`.
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* row, int64_t pack) {
  return reinterpret_cast<const Pack<T, N>*>(row)[pack];
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T* row, int64_t pack, const Pack<T, N>& value) {
  reinterpret_cast<Pack<T, N>*>(row)[pack] = value;
}

// True when `p` (null counts as aligned) may be read as packs of `bytes`.
inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The sum over the warp, the same in every lane: a butterfly whose order is fixed, and whose
// two partners compute a + b and b + a, which are equal, so the result repeats bit for bit.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The element pointer of a tensor (null when it is undefined).
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace headroom::cuda
