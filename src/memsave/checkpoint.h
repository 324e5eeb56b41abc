// Non-reentrant activation checkpointing (torch.utils.checkpoint with use_reentrant=False), built
// on saved-tensor hooks: a region keeps handles instead of its activations and recomputes them
// in backward. See Note [Activation checkpointing] and Note [Selective checkpointing].
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace headroom {

// Note [Activation checkpointing]
// checkpoint(fn, inputs) runs fn under saved-tensor hooks (Note [Saved-tensor hooks]) whose pack
// records the tensor's shape, dtype and device and returns a handle (its index in the region)
// instead of the tensor, so nothing fn saves for backward outlives the forward; the inputs are
// kept as they are. The first unpack of a backward pass re-runs fn on the inputs with grad
// enabled, the default generator's Philox state (seed, offset) and the autocast state of every
// device type as they were when the forward ran (the generator is put back afterwards), so
// dropout masks and autocast dtypes repeat exactly. The recompute collects what the region's
// nodes still need, stops as soon as the last of them is back (torch's _StopRecomputationError),
// and hands each one out once: it is freed as soon as its node has unpacked it. The
// recomputed tensors are checked against the forward's metadata (a ValueError names the index).
// Each backward pass recomputes for itself (keyed by autograd's graph task id), so a second
// backward through a retained graph works, as in torch. The region's memory (its inputs and
// the handles) is freed when the last node holding a handle has released its saved tensors.
//
// Note [Selective checkpointing]
// Inside a region, must_save(op, x) runs op and keeps its output for the recompute instead of
// recomputing it (torch's selective checkpointing with CheckpointPolicy.MUST_SAVE for that op).
// In the recompute the op is still called, so that it saves its inputs for its own backward in
// the same order as in the forward, but it is stopped right after its last save, so an op that
// saves before computing (ops/linear.cpp does) never repeats its heavy part. A kept output that
// nothing recomputed after it needs (the region's last saves come before it) is dropped at the
// end of the forward. Models keep their projections this way under the "selective" policy
// (memsave/checkpoint_policy.h), so the matmul outputs stay and the element-wise, norm,
// dropout and attention work is redone.

struct CheckpointOptions {
  // Restore the default generator's state of the forward for the recompute (torch's
  // preserve_rng_state): dropout then draws the same masks.
  bool preserve_rng_state = true;
  // Compare shape, dtype and device of every recomputed tensor with what the forward saved
  // (torch's determinism_check "default"; false is "none").
  bool determinism_check = true;
  // Stop the recompute once every tensor still needed is back.
  bool early_stop = true;
};

using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using TensorFunction = std::function<Tensor(const Tensor&)>;

// Runs fn(inputs) as a checkpointed region and returns its outputs. With grad mode off it only
// calls fn (nothing will be recomputed). fn must be a function of the inputs (and of parameters
// that stay unchanged until backward); it is kept until the region's backward has run.
std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options = {});
Tensor checkpoint(const TensorFunction& fn, const Tensor& input,
                  const CheckpointOptions& options = {});

// torch.utils.checkpoint.checkpoint_sequential: the functions are cut into `segments` runs of
// size functions.size() / segments; each run but the last is one checkpointed region, the last
// run (with the remainder) runs normally. ValueError unless 1 <= segments <= functions.size().
Tensor checkpoint_sequential(const std::vector<TensorFunction>& functions, int64_t segments,
                             const Tensor& input, const CheckpointOptions& options = {});

// Hides the checkpointed regions active on this thread for its scope, so that code running a
// graph of its own inside one (the tiled MLP's tiles, Note [Tiled MLP]) records, saves and runs
// must_save as outside any region.
class CheckpointRegionsHidden {
 public:
  CheckpointRegionsHidden();
  ~CheckpointRegionsHidden();
  CheckpointRegionsHidden(const CheckpointRegionsHidden&) = delete;
  CheckpointRegionsHidden& operator=(const CheckpointRegionsHidden&) = delete;

 private:
  struct Regions;
  std::unique_ptr<Regions> hidden_;
};

// Inside a checkpointed region: runs op(x) and keeps its output instead of recomputing it (see
// Note [Selective checkpointing]). Outside one, returns op(x).
Tensor must_save(const TensorFunction& op, const Tensor& x);

}  // namespace headroom
