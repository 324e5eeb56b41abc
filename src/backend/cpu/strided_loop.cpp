// Row decomposition of strided iteration.
#include "backend/cpu/strided_loop.h"

#include "core/strided_dims.h"

namespace headroom::cpu {

StridedRows make_strided_rows(const Tensor& dst, const Tensor* src) {
  StridedDims dims = coalesce_dims(dst, src);
  StridedRows rows;
  if (dims.sizes.empty()) return rows;
  rows.row_length = dims.sizes.back();
  rows.dst_step = dims.dst_strides.back();
  rows.src_step = dims.src_strides.back();
  dims.sizes.pop_back();
  dims.dst_strides.pop_back();
  dims.src_strides.pop_back();
  for (int64_t size : dims.sizes) rows.rows *= size;
  rows.outer_sizes = std::move(dims.sizes);
  rows.dst_outer = std::move(dims.dst_strides);
  rows.src_outer = std::move(dims.src_strides);
  return rows;
}

}  // namespace headroom::cpu
