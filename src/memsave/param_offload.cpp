// The blocks' weights in the host pool, copied in around each block (Note [Parameter offload]).
#include "memsave/param_offload.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/function_node.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "memory/memory_category.h"
#include "memsave/saved_parameter_hooks.h"
#include "nn/linear_4bit.h"

namespace headroom {
namespace {

class ParameterOffloader;

// A saved device copy: which block and which of its parameters.
struct WeightHandle final : SavedParameter {
  WeightHandle(std::shared_ptr<ParameterOffloader> o, int64_t l, size_t i);
  ~WeightHandle() override;
  Tensor unpack() override;
  std::shared_ptr<ParameterOffloader> offloader;
  int64_t layer;
  size_t index;
};

class ParameterOffloader : public std::enable_shared_from_this<ParameterOffloader> {
 public:
  ParameterOffloader(CausalLM& model, Device compute, const ParameterOffloadOptions& options)
      : compute_(compute), pool_(&host_pool(compute, options.pin_memory)) {
    const int64_t blocks = model.num_blocks();
    blocks_.resize(static_cast<size_t>(blocks));
    const auto slots = model.named_parameter_slots();
    HostPoolScope scope(compute_, *pool_);
    MemoryCategoryScope category(MemoryCategory::parameters);
    NoGradGuard no_grad;
    const auto modules = model.named_modules();
    for (int64_t layer = 0; layer < blocks; ++layer) {
      const std::string prefix = model.block_prefix(layer);
      Block& block = blocks_[static_cast<size_t>(layer)];
      for (const auto& [name, slot] : slots) {
        if (name.rfind(prefix, 0) != 0) continue;
        Tensor host = Tensor::empty(slot->shape(), slot->dtype(), host_pool_device(compute_));
        host.copy_(*slot);
        host.set_requires_grad(slot->requires_grad());
        *slot = host;  // the device tensor goes with its last reference
        block.slots.push_back(slot);
        block.host.push_back(host);
      }
      // The frozen 4-bit weights: their tensors join the block's, without gradients.
      for (const auto& [name, module] : modules) {
        auto* linear = dynamic_cast<Linear*>(module);
        if (name.rfind(prefix, 0) != 0 || linear == nullptr || !is_linear_4bit(*linear)) continue;
        Quantized q{linear, *linear->weight_4bit(), linear->compute_dtype(), block.host.size()};
        for (Tensor* t : quantized_tensors(q.host)) {
          Tensor host = Tensor::empty(t->shape(), t->dtype(), host_pool_device(compute_));
          host.copy_(*t);
          *t = host;
          block.host.push_back(host);
        }
        linear->set_weight_4bit(q.host, q.compute_dtype);
        block.quantized.push_back(std::move(q));
      }
    }
  }

  // Runs `forward` with block `layer`'s device copies in its slots.
  Tensor run(int64_t layer, const LayerForward& forward, const Tensor& x) {
    Block& block = blocks_.at(static_cast<size_t>(layer));
    std::vector<Tensor> copies;
    copies.reserve(block.host.size());
    for (const Tensor& host : block.host) copies.push_back(copy_in(host));
    struct Restore {
      Block& block;
      ~Restore() {
        for (size_t i = 0; i < block.slots.size(); ++i) *block.slots[i] = block.host[i];
        for (Quantized& q : block.quantized) q.layer->set_weight_4bit(q.host, q.compute_dtype);
      }
    } restore{block};
    for (size_t i = 0; i < block.slots.size(); ++i) *block.slots[i] = copies[i];
    for (Quantized& q : block.quantized) {
      Quant4bitWeight on_device = q.host;
      size_t i = q.first;
      for (Tensor* t : quantized_tensors(on_device)) *t = copies[i++];
      q.layer->set_weight_4bit(std::move(on_device), q.compute_dtype);
    }
    std::shared_ptr<ParameterOffloader> self = shared_from_this();
    SavedParameterHooks hooks(copies, [self, layer](size_t index) {
      self->blocks_[static_cast<size_t>(layer)].handles += 1;
      return std::make_shared<WeightHandle>(self, layer, index);
    });
    return forward(x);
  }

  // Backward: block `layer`'s parameter `index` on the device, copied in (with the block before
  // it, prefetched) if it is not there.
  Tensor device_weight(int64_t layer, size_t index) {
    Block& block = blocks_.at(static_cast<size_t>(layer));
    if (block.resident.empty()) {
      bring_in(block, false);
      if (layer > 0) {
        Block& before = blocks_[static_cast<size_t>(layer - 1)];
        if (before.resident.empty() && before.handles > 0) bring_in(before, true);
      }
    }
    if (block.ready) {
      // A prefetched block: the compute stream reads its copies after they have crossed.
      queues().wait_event(current_stream(compute_), *block.ready);
      forget_ready(block);
    }
    return block.resident.at(index);
  }

  void release_handle(int64_t layer) {
    Block& block = blocks_.at(static_cast<size_t>(layer));
    if (--block.handles == 0) {
      forget_ready(block);
      block.resident.clear();
    }
  }

  ~ParameterOffloader() {
    for (Block& block : blocks_) forget_ready(block);
  }

 private:
  // A block's frozen 4-bit weight: the layer, the weight with its tensors in the host pool, and
  // where those tensors begin in Block::host.
  struct Quantized {
    Linear* layer;
    Quant4bitWeight host;
    DType compute_dtype;
    size_t first;
  };

  struct Block {
    std::vector<Tensor*> slots;  // the parameters' slots: host[0, slots.size())
    std::vector<Quantized> quantized;
    std::vector<Tensor> host;      // the parameters themselves, then the 4-bit tensors
    std::vector<Tensor> resident;  // device copies for backward, while handles are alive
    int64_t handles = 0;           // live WeightHandles of the block
    std::optional<EventId> ready;  // a prefetch's copies done, on a GPU's copy stream
  };

  DeviceAllocator& queues() const { return caching_allocator(compute_).device_allocator(); }
  void forget_ready(Block& block) const noexcept {
    if (block.ready) queues().destroy_event(*block.ready);
    block.ready.reset();
  }

  // The defined tensors of a 4-bit weight, in a fixed order.
  static std::vector<Tensor*> quantized_tensors(Quant4bitWeight& w) {
    std::vector<Tensor*> out;
    for (Tensor* t : {&w.packed, &w.absmax, &w.nested_absmax, &w.nested_code}) {
      if (t->defined()) out.push_back(t);
    }
    return out;
  }

  // A copy of `host` on the compute device whose gradient goes back into the host leaf's .grad,
  // made in the host pool (no graph for a frozen one).
  Tensor copy_in(const Tensor& host) const {
    Tensor out;
    {
      NoGradGuard no_grad;
      MemoryCategoryScope category(MemoryCategory::parameters);
      out = Tensor::empty(host.shape(), host.dtype(), compute_);
      out.copy_async_(host);  // see Note [Parameter copies in stream order]
    }
    if (auto node = make_function_node("ParameterCopyInBackward", {host})) {
      const Device compute = compute_;
      CachingAllocator* pool = pool_;
      node->set_backward([compute, pool](BackwardContext& ctx) -> std::vector<Tensor> {
        HostPoolScope scope(compute, *pool);
        MemoryCategoryScope category(MemoryCategory::gradients);
        const Tensor& grad = ctx.grad_output();
        Tensor host_grad = Tensor::empty(grad.shape(), grad.dtype(), host_pool_device(compute));
        host_grad.copy_(grad);
        return {host_grad};
      });
      node->set_outputs({out});
    }
    return out;
  }

  // The block's device copies for backward: on the compute stream, or `ahead` (the prefetch of
  // the block before the one backward is in) on the copy stream, beside the compute, with an
  // event the block's first unpack waits for (Note [Parameter copies in stream order]). Allocated
  // from the compute stream's pool either way, as the plan allocates them.
  void bring_in(Block& block, bool ahead) const {
    NoGradGuard no_grad;
    MemoryCategoryScope category(MemoryCategory::parameters);
    const StreamId compute = current_stream(compute_);
    const StreamId copy = ahead ? copy_stream(compute_) : compute;
    // The copies' memory may still be read by the compute stream's earlier kernels.
    wait_stream(compute_, copy, compute);
    for (const Tensor& host : block.host) {
      Tensor resident = Tensor::empty(host.shape(), host.dtype(), compute_);
      {
        StreamGuard on_copy(compute_, copy);
        resident.copy_async_(host);
      }
      if (copy != compute) resident.record_stream(copy);
      block.resident.push_back(resident);
    }
    if (copy != compute) block.ready = queues().record_event(copy);
  }

  Device compute_;
  CachingAllocator* pool_;
  std::vector<Block> blocks_;
};

WeightHandle::WeightHandle(std::shared_ptr<ParameterOffloader> o, int64_t l, size_t i)
    : offloader(std::move(o)), layer(l), index(i) {}

WeightHandle::~WeightHandle() { offloader->release_handle(layer); }

Tensor WeightHandle::unpack() { return offloader->device_weight(layer, index); }

}  // namespace

void enable_parameter_offload(CausalLM& model, Device compute,
                              const ParameterOffloadOptions& options) {
  auto offloader = std::make_shared<ParameterOffloader>(model, compute, options);
  // Each call of a block's forward, now and in a recompute, puts the block's copies in.
  wrap_block_forwards(model,
                      [offloader](int64_t layer, const LayerForward& forward, const Tensor& x) {
                        return offloader->run(layer, forward, x);
                      });
}

}  // namespace headroom
