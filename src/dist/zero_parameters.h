// ZeRO-3 (arXiv 1910.02054, stage P_os+g+p) / FSDP: each transformer block's parameters are held
// by their owner rank alone, gathered for the block's forward and again for its backward, the
// block before prefetched, and freed after. See Note [ZeRO-3 parameter sharding].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "dist/communicator.h"
#include "nn/causal_lm.h"

namespace headroom {

// Note [ZeRO-3 parameter sharding]
// The shares are whole parameters, as ZeRO-1/2's (dist/zero_optimizer.h): a block parameter
// another rank owns keeps its tensor, shape and autograd state on this rank, but its storage is
// released (Storage::release, FSDP's resize of the flat parameter to 0). The model's block runner
// (Note [Block runners]) gathers the block before each call — the forward, and a checkpoint's
// recompute in backward — by materializing the storages and broadcasting each parameter from its
// owner, and releases them when the call returns; a forward starts gathering the next block too
// (the prefetch: broadcast_async, waited for when that block runs), which its own call then
// releases. While the block runs, saved-tensor hooks innermost of all replace a saved parameter
// by a handle; backward's first unpack of a block's handle gathers the block again (and starts
// the block before it, whose backward comes next: FSDP's BACKWARD_PRE prefetch), and when its
// last handle is released the block is freed; a recompute in backward leaves a block with
// handles gathered for them, so each block is gathered twice a step, as FSDP's units. Every
// rank runs the same blocks in the same order, so the broadcasts match. Gradients reach every
// rank's leaf as in ZeRO-2 and are reduced to their owners (Note [ZeRO-2 gradient reduction]); the
// owners update their parameters, and nothing is broadcast after the step. Embeddings, the final
// norm and the LM head are not sharded: they run outside the blocks, and stay whole on every
// rank, their updates broadcast by their owners as under ZeRO-1/2. Under autocast the blocks
// run with autocast's cast cache off, which would otherwise keep a 16-bit copy of every weight
// until the forward ends; a projection still saves the 16-bit cast of its weight until backward
// (with checkpointing only the block's recompute does): sharding frees the fp32 weights, not
// those casts. Likewise an FP8 layer keeps its weight's FP8 copy for the optimizer step
// (quant/fp8_linear.h), so the FP8 copies of every block stay on every rank.
class ZeroParameterSharding : public std::enable_shared_from_this<ZeroParameterSharding> {
 public:
  // Shards the blocks of `model` over the communicator's ranks: `owners` names each block
  // parameter's owner rank (the same on every rank). Call with every rank's parameters equal,
  // after enable_gradient_checkpointing and anything else that sets the block runner (this
  // one's goes innermost) and before the first forward. A parameter of another owner may be
  // released already (a sharded load, LoadOptions::keep_parameter). ValueError naming the
  // parameter when one has no owner, shares its storage with another tensor, or is this rank's
  // and was released.
  static std::shared_ptr<ZeroParameterSharding> enable(
      CausalLM& model, std::shared_ptr<Communicator> communicator,
      const std::unordered_map<std::string, int>& owners);

  // Every block gathered (to read the whole model on every rank), and released again.
  // Collectives: every rank calls them together.
  void gather_all();
  void release_all();
  // Each block in turn gathered, its parameters copied on rank `root` into host tensors (the host
  // pool, Note [The host pool]) put into the model's slots, and released: the whole model for
  // writing on `root`, while no rank's device holds more than one gathered block. A collective.
  // restore_slots() puts the parameters back.
  void copy_to_host_slots(int root);
  void restore_slots();

  // Blocks gathered so far (each release-to-gathered once, prefetches included).
  int64_t gather_count() const { return gather_count_; }

  // The runner's and the hooks' entry points (public for them; see the note).
  Tensor run(int64_t layer, const LayerForward& forward, const Tensor& x);
  Tensor parameter_for_backward(int64_t layer, size_t index);
  void release_handle(int64_t layer);

 private:
  struct Block {
    std::vector<Tensor> params;
    std::vector<Tensor*> slots;  // the model's, holding params but under copy_to_host_slots
    std::vector<int> owners;
    bool gathered = true;     // as made: whole until enable() releases the others' shares
    bool prefetched = false;  // gathered by the forward of the block before, for its own
    std::vector<std::unique_ptr<CommWork>> pending;  // a prefetch's broadcasts in flight
    int64_t handles = 0;                             // live saved-parameter handles of the block
    int running = 0;                                 // calls of run() in progress
  };

  ZeroParameterSharding(std::shared_ptr<Communicator> communicator, std::vector<Block> blocks);
  // Materializes the block and starts its broadcasts (nothing when it is gathered); with `wait`
  // also waits for them (and for a prefetch's), else leaves them in flight.
  void gather(Block& block, bool wait = true);
  void release(Block& block);

  std::shared_ptr<Communicator> communicator_;
  std::vector<Block> blocks_;
  int64_t gather_count_ = 0;
};

// Whether `name` is a parameter of one of `model`'s blocks (the ones ZeRO-3 shards).
bool is_block_parameter(const CausalLM& model, const std::string& name);

// The whole model while it lives (gather_all, then release_all); nothing without sharding.
class GatheredParameters {
 public:
  explicit GatheredParameters(ZeroParameterSharding* sharding);
  ~GatheredParameters();
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

 private:
  ZeroParameterSharding* sharding_;
};

// The whole model in rank `root`'s host memory while it lives, for writing it there
// (copy_to_host_slots, then restore_slots; FSDP's full state dict with rank0_only and
// offload_to_cpu); nothing without sharding.
class HostGatheredParameters {
 public:
  HostGatheredParameters(ZeroParameterSharding* sharding, int root);
  ~HostGatheredParameters();
  HostGatheredParameters(const HostGatheredParameters&) = delete;
  HostGatheredParameters& operator=(const HostGatheredParameters&) = delete;

 private:
  ZeroParameterSharding* sharding_;
};

}  // namespace headroom
