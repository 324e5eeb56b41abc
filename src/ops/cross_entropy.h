// Cross-entropy over the vocabulary, fused with the softmax and its gradient so that no second
// (tokens x vocab) buffer of probabilities exists (as llm.c's fused classifier).
#pragma once

#include "core/tensor.h"

namespace headroom {

// logits [..., V], targets (i32 / i64) [...]; mean over targets != ignore_index (as
// torch.nn.functional.cross_entropy). A 0-d fp32 result.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// The LM head and the loss in one op: cross_entropy(linear(x, weight), targets) with x [..., D]
// and weight [V, D], computed over chunks of tokens so that at most chunk x V logits exist at a
// time. Gradients for x and weight are computed during the forward pass when they are needed
// and kept until backward (scaled by the incoming gradient there).
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index = -100);

}  // namespace headroom
