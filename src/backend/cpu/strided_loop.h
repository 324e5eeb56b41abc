// Iteration over two same-shaped strided tensors as rows of the innermost coalesced dimension
// (see core/strided_dims.h), so a copy between contiguous tensors is a single row.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace headroom::cpu {

struct StridedRows {
  int64_t row_length = 1;
  int64_t dst_step = 1, src_step = 1;  // strides within a row, in elements
  int64_t rows = 1;
  std::vector<int64_t> outer_sizes;           // the dims over which rows repeat, innermost last
  std::vector<int64_t> dst_outer, src_outer;  // their strides, in elements

  // Element offsets (relative to each tensor's first element) of the start of row `r`.
  void row_start(int64_t r, int64_t* dst_offset, int64_t* src_offset) const {
    int64_t d = 0, s = 0;
    for (int i = static_cast<int>(outer_sizes.size()) - 1; i >= 0; --i) {
      const int64_t idx = r % outer_sizes[i];
      r /= outer_sizes[i];
      d += idx * dst_outer[i];
      s += idx * src_outer[i];
    }
    *dst_offset = d;
    *src_offset = s;
  }
};

// `src` may be undefined (a fill): only dst's layout is then used.
StridedRows make_strided_rows(const Tensor& dst, const Tensor* src);

}  // namespace headroom::cpu
