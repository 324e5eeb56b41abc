// HEADROOM_HD marks small functions that CUDA kernels and CPU code share, so both compute the
// same bits. Core headers never include cuda_runtime.h; the attribute is all they need.
#pragma once

#if defined(__CUDACC__)
#define HEADROOM_HD __host__ __device__
#else
#define HEADROOM_HD
#endif
