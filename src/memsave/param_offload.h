// Parameter offload: the blocks' weights live in the host pool; each block is copied in for its
// forward and again for its backward, the next block prefetched, and released after (FSDP's CPU
// offload and ZeRO-Infinity's offload_param on one rank). See Note [Parameter offload].
#pragma once

#include "core/device.h"
#include "nn/causal_lm.h"

namespace headroom {

// Note [Parameter offload]
// enable_parameter_offload makes every block parameter a leaf in the host pool (Note [The host
// pool]) — frozen or trainable as before — and wraps the forward the model hands its block
// runner (Note [Block runners]) so that, for each call (the forward, and a checkpoint's
// recompute in backward), the block's slots hold device copies of the host parameters made by a
// differentiable copy: the gradients flow back through it into the host leaves' .grad, in the
// host pool. While the block runs, saved-tensor hooks innermost of all replace a saved device
// copy by a handle (the rest go on to the hooks around them: activation offload, checkpointing);
// backward's first unpack of a block's handle copies the block in again (no graph) and the block
// before it too (the prefetch), and when the last handle of a block is released its copies are
// freed. Copies are exact, so the losses and gradients are those of a run without offload. The
// optimizer steps the host leaves in the host pool (the trainer offloads the optimizer with the
// parameters). Under autocast a projection still saves the 16-bit cast of its weight until
// backward: parameter offload removes the fp32 weights from the device, not those casts.
// A 4-bit base's weights (QLoRA's frozen NF4 / FP4 blocks, their absmax and nested
// quantization) are offloaded with their block the same way: their tensors live in the host
// pool, the layer holds device copies while the block runs, and linear_4bit saves them for
// backward through the same handles, so a 70B QLoRA base needs one block of it on the device.

// Note [Parameter copies in stream order]
// On a GPU the copies in (forward, recompute, backward's block and its prefetch) are queued on
// the compute stream from the page-locked pool (Tensor::copy_async_), not made with copy_, which
// waits for the stream to drain: a QLoRA block has some 40 tensors, each a host synchronisation
// per pass. In stream order no event is needed: the kernels that read a copy are queued after
// it. Backward's prefetch of the block before is queued on the copy stream instead, after the
// compute stream's work so far, so that it crosses while this block's backward runs; the
// block's first unpack makes the compute stream wait for its event. The host leaves are not
// written while a copy may be pending: the optimizer writes them
// after backward, whose gradients come back through synchronous copies that drain the stream
// first. On the CPU and the meta device copy_async_ is copy_: the same bytes, the same plan.

struct ParameterOffloadOptions {
  bool pin_memory = true;  // page-locked host pool when the compute device is a GPU
};

// Call after enable_gradient_checkpointing, before enable_activation_offload (whose hooks then
// sit outside this one's and never see a weight) and before an optimizer is built over the
// parameters (it must see the host leaves).
void enable_parameter_offload(CausalLM& model, Device compute,
                              const ParameterOffloadOptions& options = {});

}  // namespace headroom
