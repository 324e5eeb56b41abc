// The tiled MLP (Arctic Long Sequence Training's TiledMLP): a block's MLP runs over tiles of the
// tokens in forward and again in backward, so its tokens x intermediate tensors exist one tile
// at a time. See Note [Tiled MLP].
#pragma once

#include <cstdint>

#include "nn/causal_lm.h"

namespace headroom {

// Note [Tiled MLP]
// At long context the largest tensors of a block are the MLP's: gate, up and their product are
// tokens x intermediate (3.5 x hidden for Llama 3.1 8B), and backward adds their gradients.
// tiled_mlp(module, forward, x, tile) cuts the [B, T, H] input into tiles of `tile` tokens (of the
// B x T, in order) and runs forward on each under no_grad, writing each tile's output into one
// [B, T, H] result: only one tile's intermediates are alive. It records one node,
// TiledMlpBackward0, whose inputs are x and the module's trainable parameters and which saves x
// alone (before the tiles run, so a checkpoint's recompute stops there when nothing after the
// MLP is needed). Its backward recomputes each tile with grad enabled under the forward's
// autocast state and generator state (dropout repeats its masks), takes the tile's gradients
// with autograd's grad() (nothing is accumulated into .grad and no hook runs per tile), writes
// the tile's input gradient over the rows of the output gradient it has just consumed (no
// second [B, T, H] buffer) and sums the parameters' gradients over the tiles, handing them on
// once: a parameter's hooks (data parallel's buckets, LOMO, offload) see one gradient, as with
// the untiled MLP. Outputs and input gradients are computed row by row as the untiled MLP's:
// bit for bit on the CPU when each tile's first token is a multiple of the rows oneDNN's sgemm
// computes together (16 or 24), which the automatic tile keeps. A parameter's gradient is a sum
// over the tokens, which the tiles add in another order (the GEMMs' own blocking of that sum
// changes with the rows), so it equals the untiled one to fp32's rounding of that sum, not bit
// for bit. With one tile the MLP runs untouched.
//
// The tile, by default (tile_tokens 0), is Arctic's: ceil(tokens / hidden) tiles, so a tile's
// tokens x intermediate tensor is no larger than one of the MLP's hidden x intermediate weights,
// rounded up to a multiple of 64 tokens.

// The tokens per tile for `tokens` tokens of a model of width `hidden`: tile_tokens when
// positive, else ceil(tokens / ceil(tokens / hidden)) rounded up to a multiple of 64 (all the
// tokens when they make one tile).
int64_t mlp_tile_tokens(int64_t tokens, int64_t hidden, int64_t tile_tokens = 0);

// forward(x) over tiles of `tile` tokens, as Note [Tiled MLP] says; module is the MLP whose
// trainable parameters get gradients.
Tensor tiled_mlp(const Module& module, const LayerForward& forward, const Tensor& x, int64_t tile);

// Runs every MLP of the model tiled (through its block runners' mlp, Note [Block runners]), with
// tiles of mlp_tile_tokens(tokens, hidden, tile_tokens). Composes with checkpointing and
// activation offload in either order; not with parameter offload, ZeRO-3 or FP8, which the
// run's resolver refuses (train/training_config.cpp).
void enable_tiled_mlp(CausalLM& model, int64_t tile_tokens = 0);

}  // namespace headroom
