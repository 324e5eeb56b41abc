// The GEMM entry's workspace (backend/cuda/gemm.cpp fills GemmKernels::gemm through cuBLASLt): its
// size, and how it shows in the allocator's statistics and the planner's estimate.
#pragma once

#include <cstddef>

namespace headroom::cuda {

// Note [cuBLASLt workspace]
// cuBLASLt's faster kernels (split-K, stream-K) need scratch memory. The gemm entry takes it from
// the device's caching allocator as one u8 Tensor of kGemmWorkspaceBytes per device and stream,
// allocated on the first GEMM there and kept until the process ends, as PyTorch does
// (CUBLASLT_WORKSPACE_SIZE, getChosenWorkspaceSize: 32 MiB on Hopper). It is tagged
// `temporaries`, whichever scope the first GEMM ran in. So on a GPU it counts in
// memory_allocated / memory_reserved (one 32 MiB segment of the large pool, no rounding), while a
// meta dry run, which has no GEMM kernels, never allocates it: a dry run's peak is the GPU's peak
// less this workspace. The planner's per-GPU overhead (Note [CUDA overhead per GPU family] in
// plan/gpu_specs.h) must therefore keep counting it on top of the dry run: workspace_bytes =
// kGemmWorkspaceBytes for each stream that runs GEMMs (one in a training step), i.e. the 32 MiB
// it already uses for Hopper; only the place changes (inside the allocator, not beside it).
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

}  // namespace headroom::cuda
