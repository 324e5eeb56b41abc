// The seam through which layers above nn wrap a model's transformer blocks and the projections
// inside them (activation checkpointing, in memsave). See Note [Block runners].
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace headroom {

class Linear;
class Module;

// Note [Block runners]
// nn sits below memsave, so a model cannot call checkpoint() itself. Instead every CausalLM
// owns one BlockRunners (CausalLM::set_block_runners), shared with its blocks, that code above
// fills in, as HF's models take a _gradient_checkpointing_func:
// - block: the model runs block `layer` as block(layer, forward, x) instead of forward(x), so
//   a runner can pass forward to checkpoint() for the blocks its policy picks;
// - matmul: a block runs each of its projections (the Linear layers: GPT-2's c_attn, c_proj,
//   c_fc, Llama's q/k/v/o and gate/up/down) as matmul(forward, x), so selective checkpointing
//   can keep their outputs (memsave's must_save) while the rest of the block is recomputed.
// - mlp: a block runs its MLP as mlp(module, forward, x), so a runner can run it over tiles of
//   the tokens (memsave's tiled MLP: Note [Tiled MLP]); module is the MLP, whose trainable
//   parameters the runner hands gradients to.
// An empty runner costs one test: forward(x) is called directly. Embeddings, the final norm
// and the fused LM head + loss run outside the blocks and are never wrapped. A forward passed
// to a runner may be called again later (a recompute in backward): it reads only its argument
// and the module's parameters.
using LayerForward = std::function<Tensor(const Tensor&)>;
using BlockRunner =
    std::function<Tensor(int64_t layer, const LayerForward& forward, const Tensor& x)>;
using MatmulRunner = std::function<Tensor(const LayerForward& forward, const Tensor& x)>;
using ModuleRunner =
    std::function<Tensor(const Module& module, const LayerForward& forward, const Tensor& x)>;

struct BlockRunners {
  BlockRunner block;
  MatmulRunner matmul;
  ModuleRunner mlp;
};

// block `layer`'s forward(x), through runners.block when set (runners may be null).
Tensor run_block(const BlockRunners* runners, int64_t layer, const LayerForward& forward,
                 const Tensor& x);
// linear.forward(x), through runners.matmul when set (runners may be null).
Tensor run_matmul(const BlockRunners* runners, const Linear& linear, const Tensor& x);
// The MLP `module`'s forward(x), through runners.mlp when set (runners may be null).
Tensor run_mlp(const BlockRunners* runners, const Module& module, const LayerForward& forward,
               const Tensor& x);

}  // namespace headroom
