// The layout kernels iterate over when copying between (or filling) strided tensors: size-1
// dimensions dropped and neighbours merged where every tensor lays them out back to back, so a
// copy between contiguous tensors is one long dimension. Shared by the CPU and CUDA backends.
#pragma once

#include <cstdint>
#include <vector>

namespace headroom {

class Tensor;

struct StridedDims {
  // Outermost first; strides in elements. src_strides is all zeros when there is no source.
  std::vector<int64_t> sizes, dst_strides, src_strides;
};

// `src`, when given, has dst's shape (it may have zero strides from expand).
StridedDims coalesce_dims(const Tensor& dst, const Tensor* src);

}  // namespace headroom
