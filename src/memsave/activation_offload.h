// Activation offload: the tensors a model's blocks save for backward move to the host pool as
// they are saved and come back one block ahead of backward (torch's save_on_cpu with a prefetch;
// with checkpointing, the checkpoint inputs only, as transformers' gradient_checkpointing_kwargs
// {"offload": true}). See Note [Activation offload].
#pragma once

#include <cstdint>

#include "core/device.h"
#include "nn/causal_lm.h"

namespace headroom {

// Note [Activation offload]
// enable_activation_offload wraps the model's block runner (Note [Block runners]) so that each
// block runs under saved-tensor hooks (Note [Saved-tensor hooks]) whose pack copies a saved
// tensor into the host pool (Note [The host pool]) and keeps only the copy, and whose unpack
// brings it back. Under checkpointing the checkpoint's own hooks are innermost inside the
// region, so only what the region keeps — its inputs — reaches these hooks. Tensors smaller
// than min_bytes stay (their copy costs more than it saves), and so do the model's weights,
// which stay alive on the device anyway. The first unpack of block L in backward also brings
// back every tensor block L-1 offloaded, so the copies of the next block overlap this one's
// backward on a GPU; each prefetched tensor is handed out once and freed by its node. Copies
// are exact: the losses and gradients are those of a run without offload.

struct ActivationOffloadOptions {
  int64_t min_bytes = 64 << 10;
  bool pin_memory = true;  // page-locked host pool when the compute device is a GPU
};

// Call after enable_gradient_checkpointing (which replaces the runners); the offload wraps
// whatever block runner is set.
void enable_activation_offload(CausalLM& model, Device compute,
                               const ActivationOffloadOptions& options = {});

}  // namespace headroom
