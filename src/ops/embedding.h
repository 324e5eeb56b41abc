// Token and position embeddings: a gather of rows, with a scatter-add backward.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace headroom {

// How embedding learns that every id is in [0, num_embeddings): by reading back a check made on
// the device (a host sync on a GPU), or from its caller, who made the ids so (positions from
// arange below a length checked on the host).
enum class IdCheck : uint8_t { read_back, by_caller };

// weight [num_embeddings, dim], ids (i32 / i64) of any shape -> ids.shape + [dim]. An id out of
// range is an IndexError naming it and its position (with IdCheck::read_back). padding_idx (in
// [0, num_embeddings)): that row gets no gradient from the lookup, as torch.nn.Embedding's
// padding_idx (HF's Llama-shaped models pass pad_token_id).
Tensor embedding(const Tensor& weight, const Tensor& ids, IdCheck check = IdCheck::read_back,
                 std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace headroom
