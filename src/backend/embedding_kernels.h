// The embedding's kernel table (Note [Kernel tables] in backend/kernel_table.h); ids are i32 or
// i64.
#pragma once

#include <cstdint>
#include <optional>

#include "backend/kernel_table.h"
#include "core/tensor.h"

namespace headroom {

struct EmbeddingKernels {
  static constexpr const char* kName = "embedding";

  // The flat index of the first id outside [0, num_embeddings), or nullopt (also the meta
  // device's no-op answer: its ids have no values). Reads back (one sync).
  Kernel<std::optional<int64_t>(const Tensor& ids, int64_t num_embeddings)> first_bad_id{
      "first_bad_id"};
  // out[i] = weight[ids[i]] in weight's dtype (out has weight's dtype).
  Kernel<void(const Tensor& weight, const Tensor& ids, const Tensor& out)> forward{"forward"};
  // grad_weight (f32, [num_embeddings, dim]) = scatter-add of grad_out's rows; the entry zeroes it.
  Kernel<void(const Tensor& grad_out, const Tensor& ids, const Tensor& grad_weight)> backward{
      "backward"};
};

}  // namespace headroom
