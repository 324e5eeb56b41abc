// Dimension coalescing for strided kernels.
#include "core/strided_dims.h"

#include "core/tensor.h"

namespace headroom {

StridedDims coalesce_dims(const Tensor& dst, const Tensor* src) {
  StridedDims dims;
  for (int i = 0; i < dst.ndim(); ++i) {
    const int64_t size = dst.shape()[i];
    if (size == 1) continue;
    const int64_t d = dst.strides()[i], s = src ? src->strides()[i] : 0;
    // Merge into the outer neighbour when both tensors continue it without a gap.
    if (!dims.sizes.empty() && dims.dst_strides.back() == d * size &&
        dims.src_strides.back() == s * size) {
      dims.sizes.back() *= size;
      dims.dst_strides.back() = d;
      dims.src_strides.back() = s;
      continue;
    }
    dims.sizes.push_back(size);
    dims.dst_strides.push_back(d);
    dims.src_strides.push_back(s);
  }
  return dims;
}

}  // namespace headroom
