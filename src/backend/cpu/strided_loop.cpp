// Row decomposition of strided iteration.
#include "backend/cpu/strided_loop.h"

namespace headroom::cpu {

StridedRows make_strided_rows(const Tensor& dst, const Tensor* src) {
  struct Dim { int64_t size, dst_stride, src_stride; };
  std::vector<Dim> dims;
  for (int i = 0; i < dst.ndim(); ++i) {
    if (dst.shape()[i] == 1) continue;
    dims.push_back({dst.shape()[i], dst.strides()[i], src ? src->strides()[i] : 0});
  }
  // Merge a dim into the one inside it when both tensors lay them out back to back.
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& outer = merged.back();
      if (outer.dst_stride == d.dst_stride * d.size && outer.src_stride == d.src_stride * d.size) {
        outer = {outer.size * d.size, d.dst_stride, d.src_stride};
        continue;
      }
    }
    merged.push_back(d);
  }
  StridedRows rows;
  if (merged.empty()) return rows;
  const Dim inner = merged.back();
  merged.pop_back();
  rows.row_length = inner.size;
  rows.dst_step = inner.dst_stride;
  rows.src_step = inner.src_stride;
  for (const Dim& d : merged) {
    rows.outer_sizes.push_back(d.size);
    rows.dst_outer.push_back(d.dst_stride);
    rows.src_outer.push_back(d.src_stride);
    rows.rows *= d.size;
  }
  return rows;
}

}  // namespace headroom::cpu
