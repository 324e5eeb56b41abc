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
//
// Note [Offload on the copy stream]
// On a GPU with the pinned pool the copies are queued on the device's copy stream, beside the
// compute stream (Tensor::copy_async_, no host synchronisation): a saved tensor leaves while
// the next ops of its block run, the copy stream first waiting for the compute stream so that it
// reads the finished tensor; the device tensor and the host block are recorded as used by the
// copy stream, so the allocator reuses neither before the copy has run (Note [Streams and
// reuse]). In backward the copies back (the prefetch of block L-1 included) are allocated from
// the compute stream's pool, as the plan allocates them, and queued on the copy stream after the
// compute stream's work so far, each followed by an event; the compute stream waits for that
// tensor's event before it reads it, so block L-1's prefetch runs beside block L's backward.
// On the CPU and the meta device every stream is one: the same code copies synchronously, and
// the bytes and the results are those the plan and the tests see.

struct ActivationOffloadOptions {
  int64_t min_bytes = 64 << 10;
  bool pin_memory = true;  // page-locked host pool when the compute device is a GPU
};

// Call after enable_gradient_checkpointing (which replaces the runners); the offload wraps
// whatever block runner is set.
void enable_activation_offload(CausalLM& model, Device compute,
                               const ActivationOffloadOptions& options = {});

}  // namespace headroom
