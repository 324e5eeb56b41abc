// Which blocks of a model are checkpointed, by one option (HF's gradient_checkpointing plus
// headroom's policy names), and the call that applies it to a CausalLM.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "memsave/checkpoint.h"
#include "nn/causal_lm.h"

namespace headroom {

// none:      nothing is recomputed.
// full:      every block is one checkpointed region: only its input is kept.
// every_N:   blocks 0, N, 2N, ... are checkpointed, the others run normally (every_1 is full);
//            ceil(L / N) of L blocks are recomputed, so memory falls between none and full.
// selective: every block is checkpointed but keeps the outputs of its projections (the
//            matmuls: Note [Selective checkpointing]); the norms, element-wise ops, dropout and
//            the flash-style attention are recomputed. Megatron's "selective" recomputes only
//            the attention core, which here keeps no T x T matrix, so we recompute all the
//            cheap work instead.
struct CheckpointPolicy {
  enum class Kind { none, full, every_n, selective };
  Kind kind = Kind::none;
  int64_t every = 1;  // N of every_N

  // Whether block `layer` runs as a checkpointed region.
  bool checkpoints_block(int64_t layer) const;
  // The option text: "none", "full", "every_2", "selective".
  std::string name() const;
  bool operator==(const CheckpointPolicy&) const = default;
};

// Reads "none", "full", "every_N" (N >= 1) or "selective"; ValueError otherwise.
CheckpointPolicy parse_checkpoint_policy(std::string_view text);

// Sets the model's block runners (Note [Block runners]) so that its blocks are checkpointed as
// `policy` says; "none" clears them. Takes effect at the next forward.
void enable_gradient_checkpointing(CausalLM& model,
                                   const CheckpointPolicy& policy = {CheckpointPolicy::Kind::full},
                                   const CheckpointOptions& options = {});
void disable_gradient_checkpointing(CausalLM& model);

}  // namespace headroom
