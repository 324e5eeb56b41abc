// Shape ops that record autograd: the Tensor methods of the same names do not (they are the
// kernels' tools); model code uses these.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace headroom {

Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor contiguous(const Tensor& x);
// Views of consecutive pieces of `sizes` along `dim` (as torch.split with a list). One node for
// all pieces, so backward assembles one gradient buffer instead of one per piece.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);

}  // namespace headroom
