// Calling a block or a projection through the model's runners (Note [Block runners]).
#include "nn/block_runner.h"

#include "nn/layers.h"

namespace headroom {

Tensor run_block(const BlockRunners* runners, int64_t layer, const LayerForward& forward,
                 const Tensor& x) {
  if (runners && runners->block) return runners->block(layer, forward, x);
  return forward(x);
}

Tensor run_matmul(const BlockRunners* runners, const Linear& linear, const Tensor& x) {
  if (runners && runners->matmul) {
    return runners->matmul([&linear](const Tensor& in) { return linear.forward(in); }, x);
  }
  return linear.forward(x);
}

Tensor run_mlp(const BlockRunners* runners, const Module& module, const LayerForward& forward,
               const Tensor& x) {
  if (runners && runners->mlp) return runners->mlp(module, forward, x);
  return forward(x);
}

}  // namespace headroom
