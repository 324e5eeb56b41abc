// Token and position embeddings: a gather of rows, with a scatter-add backward.
#pragma once

#include "core/tensor.h"

namespace headroom {

// weight [num_embeddings, dim], ids (i32 / i64) of any shape -> ids.shape + [dim].
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace headroom
