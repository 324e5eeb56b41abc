// Cross-entropy over the vocabulary, fused with the softmax and its gradient so that no second
// (tokens x vocab) buffer of probabilities exists (as llm.c's fused classifier).
#pragma once

#include <optional>

#include "core/tensor.h"

namespace headroom {

// logits [..., V], targets (i32 / i64) [...]; mean over targets != ignore_index (as
// torch.nn.functional.cross_entropy). A 0-d fp32 result.
// Note [Targets counted by the caller]: `target_count` >= 0 is the number of targets that are
// not ignore_index, counted where they were made (on the host, TokenBatch), every other one
// known to lie in [0, V): the op then neither counts nor checks them, which on a GPU is a
// read-back (a host sync) a step. -1: counted and checked here (IndexError naming one outside).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     int64_t target_count = -1);

// The LM head and the loss in one op: cross_entropy(linear(x, weight), targets) with x [..., D]
// and weight [V, D], computed over chunks of tokens so that at most chunk x V logits exist at a
// time. Gradients for x and weight are computed during the forward pass when they are needed
// and kept until backward (scaled by the incoming gradient there).
// Only the gradients of inputs that require one are computed and kept (none under no-grad):
// dx [..., D] in the operands' dtype (x's and weight's when they share one, else f32) and dweight
// [V, D] in fp32 live from the forward to the backward, which scales them by the incoming gradient
// (a loss scale, 1/N for accumulation) in place, so no copy is made unless the graph is retained.
// bf16 / f16 x and weight run the GEMMs in their dtype (the logits stay fp32; their gradient is
// rounded to the operands' dtype for the two backward GEMMs).
// `target_count`: as cross_entropy's (Note [Targets counted by the caller]).
// logit_softcap c: the loss of the capped logits c * tanh(z / c) (Gemma 2's
// final_logit_softcapping), each chunk capped in place and its gradient carried through the cap
// (a kernel launch more a chunk); null: none.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index = -100, int64_t target_count = -1,
                            std::optional<double> logit_softcap = {});

// Note [Loss chunks]
// The tokens per chunk linear_cross_entropy uses for `rows` tokens of vocabulary V, whose chunk
// buffers take `bytes_per_logit` a logit (fp32 logits, and their gradient in the operands' dtype
// when it is not fp32): equal chunks, as few as keep the buffers within kLossChunkBytes, and at
// least 128 tokens (the dweight GEMM's inner size is the chunk; a thinner one is bound by
// streaming the [V, D] accumulator). Each chunk is 5 launches (3 GEMMs, loss forward and
// backward), so fewer chunks are fewer launches: GPT-2's 16 x 1024 tokens with bf16 operands
// (6 bytes a logit) are 19 chunks of 863 tokens, where a fixed 128 made 128 chunks.
inline constexpr int64_t kLossChunkBytes = int64_t{256} << 20;
int64_t linear_cross_entropy_chunk_rows(int64_t vocab, int64_t rows, int64_t bytes_per_logit);
// linear_cross_entropy with an explicit number of tokens per chunk (> 0; 0: Note [Loss chunks]).
Tensor linear_cross_entropy_chunked(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                    int64_t ignore_index, int64_t chunk_rows,
                                    int64_t target_count = -1,
                                    std::optional<double> logit_softcap = {});

}  // namespace headroom
