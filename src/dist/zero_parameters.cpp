// ZeRO-3's sharded block parameters, gathered around each use (Note [ZeRO-3 parameter sharding]).
#include "dist/zero_parameters.h"

#include <unordered_set>
#include <utility>

#include "autograd/engine.h"
#include "core/autocast_mode.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/storage.h"
#include "memory/host_pool.h"
#include "memory/memory_category.h"
#include "memsave/saved_parameter_hooks.h"

namespace headroom {
namespace {

// A saved block parameter: which block and which of its parameters.
struct ParameterHandle final : SavedParameter {
  ParameterHandle(std::shared_ptr<ZeroParameterSharding> s, int64_t l, size_t i)
      : sharding(std::move(s)), layer(l), index(i) {}
  ~ParameterHandle() override { sharding->release_handle(layer); }
  Tensor unpack() override { return sharding->parameter_for_backward(layer, index); }
  std::shared_ptr<ZeroParameterSharding> sharding;
  int64_t layer;
  size_t index;
};

}  // namespace

ZeroParameterSharding::ZeroParameterSharding(std::shared_ptr<Communicator> communicator,
                                             std::vector<Block> blocks)
    : communicator_(std::move(communicator)), blocks_(std::move(blocks)) {}

std::shared_ptr<ZeroParameterSharding> ZeroParameterSharding::enable(
    CausalLM& model, std::shared_ptr<Communicator> communicator,
    const std::unordered_map<std::string, int>& owners) {
  const auto named = model.named_parameter_slots();
  std::vector<Block> blocks(static_cast<size_t>(model.num_blocks()));
  std::unordered_set<const Storage*> storages;
  for (int64_t layer = 0; layer < model.num_blocks(); ++layer) {
    const std::string prefix = model.block_prefix(layer);
    Block& block = blocks[static_cast<size_t>(layer)];
    for (const auto& [name, slot] : named) {
      if (name.rfind(prefix, 0) != 0) continue;
      const Tensor& p = *slot;
      const auto it = owners.find(name);
      if (it == owners.end()) {
        throw ValueError(str_cat("zero_stage 3: block parameter ", name, " has no owner rank"));
      }
      if (it->second < 0 || it->second >= communicator->world_size()) {
        throw ValueError(str_cat("zero_stage 3: owner ", it->second, " of ", name,
                                 " is not a rank of ", communicator->world_size()));
      }
      // Released storage would take any other parameter on it along.
      if (p.storage_offset() != 0 || p.nbytes() != p.storage()->nbytes() ||
          !storages.insert(p.storage().get()).second) {
        throw ValueError(str_cat("zero_stage 3: block parameter ", name,
                                 " shares its storage with another tensor; it cannot be sharded"));
      }
      if (it->second == communicator->rank() && !p.storage()->materialized()) {
        throw ValueError(str_cat("zero_stage 3: block parameter ", name, " is rank ", it->second,
                                 "'s but was not loaded there"));
      }
      block.params.push_back(p);
      block.slots.push_back(slot);
      block.owners.push_back(it->second);
    }
  }
  std::shared_ptr<ZeroParameterSharding> sharding(
      new ZeroParameterSharding(std::move(communicator), std::move(blocks)));
  sharding->release_all();
  // Each call of a block's forward, now and in a recompute, gathers the block first.
  wrap_block_forwards(model,
                      [sharding](int64_t layer, const LayerForward& forward, const Tensor& x) {
                        return sharding->run(layer, forward, x);
                      });
  return sharding;
}

void ZeroParameterSharding::gather(Block& block, bool wait) {
  if (!block.gathered) {
    NoGradGuard no_grad;
    MemoryCategoryScope category(MemoryCategory::parameters);
    const int rank = communicator_->rank();
    for (size_t i = 0; i < block.params.size(); ++i) {
      if (block.owners[i] != rank) block.params[i].storage()->materialize();
    }
    for (size_t i = 0; i < block.params.size(); ++i) {
      block.pending.push_back(
          communicator_->broadcast_async(block.params[i].detach(), block.owners[i]));
    }
    block.gathered = true;
    ++gather_count_;
  }
  if (wait) {
    for (const auto& work : block.pending) work->wait();
    block.pending.clear();
  }
}

void ZeroParameterSharding::release(Block& block) {
  // A broadcast in flight still writes into the memory.
  for (const auto& work : block.pending) work->wait();
  block.pending.clear();
  const int rank = communicator_->rank();
  for (size_t i = 0; i < block.params.size(); ++i) {
    if (block.owners[i] != rank) block.params[i].storage()->release();
  }
  block.gathered = false;
  block.prefetched = false;
}

void ZeroParameterSharding::gather_all() {
  for (Block& block : blocks_) gather(block);
}

void ZeroParameterSharding::release_all() {
  for (Block& block : blocks_) {
    if (block.handles == 0 && block.running == 0) release(block);
  }
}

void ZeroParameterSharding::copy_to_host_slots(int root) {
  const bool here = communicator_->rank() == root;
  const Device device = communicator_->device();
  CachingAllocator& pool = host_pool(device);
  for (Block& block : blocks_) {
    const bool gathered_here = !block.gathered;
    gather(block);
    if (here) {
      NoGradGuard no_grad;
      HostPoolScope scope(device, pool);
      MemoryCategoryScope category(MemoryCategory::parameters);
      for (size_t i = 0; i < block.params.size(); ++i) {
        Tensor copy = Tensor::empty(block.params[i].shape(), block.params[i].dtype(),
                                    host_pool_device(device));
        copy.copy_(block.params[i]);
        *block.slots[i] = copy;
      }
    }
    if (gathered_here) release(block);
  }
}

void ZeroParameterSharding::restore_slots() {
  for (Block& block : blocks_) {
    for (size_t i = 0; i < block.params.size(); ++i) *block.slots[i] = block.params[i];
  }
  // The copies are gone: the pool's cache would keep the model's size of host memory.
  host_pool(communicator_->device()).empty_cache();
}

Tensor ZeroParameterSharding::run(int64_t layer, const LayerForward& forward, const Tensor& x) {
  Block& block = blocks_.at(static_cast<size_t>(layer));
  // Released when this call returns if this call (or the block before's, prefetching) gathered
  // it; a block gathered by backward (or gather_all) stays until its handles go (or release_all).
  const bool gathered_here = !block.gathered || block.prefetched;
  block.prefetched = false;
  gather(block);
  // A forward runs the blocks in order: the next one's broadcasts start now and are waited for
  // when it runs (DeepSpeed's prefetch), so that they overlap this block's compute. Backward's
  // order is the other way, and its unpacks prefetch (parameter_for_backward).
  if (current_graph_task_id() == 0 && static_cast<size_t>(layer) + 1 < blocks_.size()) {
    Block& next = blocks_[static_cast<size_t>(layer) + 1];
    if (!next.gathered) {
      gather(next, /*wait=*/false);
      next.prefetched = true;
    }
  }
  ++block.running;
  // Autocast's cache would keep the 16-bit cast of every gathered weight until the forward
  // ends, the whole model's by the last block: each weight is cast for its one use instead.
  const DeviceType type = communicator_->device().type;
  const AutocastDeviceState autocast = AutocastMode::get(type);
  AutocastDeviceState uncached = autocast;
  uncached.cache_enabled = false;
  AutocastMode::set(type, uncached);
  struct Done {
    ZeroParameterSharding& sharding;
    Block& block;
    bool release;
    DeviceType type;
    AutocastDeviceState autocast;
    ~Done() {
      AutocastMode::set(type, autocast);
      --block.running;
      // A recompute in backward leaves a block that saved parameters gathered for the backward
      // that follows at once: its last handle frees it (not a release and a gather again).
      const bool awaited = current_graph_task_id() != 0 && block.handles > 0;
      if (release && block.running == 0 && !awaited) sharding.release(block);
    }
  } done{*this, block, gathered_here, type, autocast};
  std::shared_ptr<ZeroParameterSharding> self = shared_from_this();
  SavedParameterHooks hooks(block.params, [self, layer](size_t index) {
    self->blocks_[static_cast<size_t>(layer)].handles += 1;
    return std::make_shared<ParameterHandle>(self, layer, index);
  });
  return forward(x);
}

Tensor ZeroParameterSharding::parameter_for_backward(int64_t layer, size_t index) {
  Block& block = blocks_.at(static_cast<size_t>(layer));
  // The block's first unpack (gathered here, or prefetched by the block after's).
  const bool first = !block.gathered || !block.pending.empty();
  gather(block);
  // Backward goes from the last block to the first: the one before is next.
  if (first && layer > 0) {
    Block& before = blocks_[static_cast<size_t>(layer - 1)];
    if (!before.gathered && before.handles > 0) gather(before, /*wait=*/false);
  }
  // A view of the parameter: the caller gets the data, not the leaf's autograd state.
  return block.params.at(index).detach();
}

void ZeroParameterSharding::release_handle(int64_t layer) {
  Block& block = blocks_.at(static_cast<size_t>(layer));
  if (--block.handles == 0 && block.running == 0 && block.gathered) release(block);
}

bool is_block_parameter(const CausalLM& model, const std::string& name) {
  for (int64_t layer = 0; layer < model.num_blocks(); ++layer) {
    if (name.rfind(model.block_prefix(layer), 0) == 0) return true;
  }
  return false;
}

GatheredParameters::GatheredParameters(ZeroParameterSharding* sharding) : sharding_(sharding) {
  if (sharding_) sharding_->gather_all();
}

GatheredParameters::~GatheredParameters() {
  if (sharding_) sharding_->release_all();
}

HostGatheredParameters::HostGatheredParameters(ZeroParameterSharding* sharding, int root)
    : sharding_(sharding) {
  if (sharding_) sharding_->copy_to_host_slots(root);
}

HostGatheredParameters::~HostGatheredParameters() {
  if (sharding_) sharding_->restore_slots();
}

}  // namespace headroom
