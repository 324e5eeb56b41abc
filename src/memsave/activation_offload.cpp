// Saved-tensor hooks that keep a block's saved tensors in the host pool (Note [Activation
// offload]).
#include "memsave/activation_offload.h"

#include <any>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "autograd/saved_tensor.h"
#include "core/grad_mode.h"
#include "core/storage.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "memory/memory_category.h"
#include "nn/linear_4bit.h"

namespace headroom {
namespace {

struct OffloadedActivation {
  Tensor host;    // the copy in the host pool
  Tensor device;  // brought back ahead of its unpack, handed out once
  int64_t layer = 0;
  bool handed_out = false;
  // The copy back's completion, on the copy stream, while the compute stream has not waited for
  // it (a GPU's; none where every stream is one).
  DeviceAllocator* queues = nullptr;
  std::optional<EventId> back;

  OffloadedActivation() = default;
  OffloadedActivation(const OffloadedActivation&) = delete;
  OffloadedActivation& operator=(const OffloadedActivation&) = delete;
  ~OffloadedActivation() { forget_copy_back(); }
  void forget_copy_back() noexcept {
    if (back) queues->destroy_event(*back);
    back.reset();
  }
};

class ActivationOffloader {
 public:
  ActivationOffloader(CausalLM& model, Device compute, const ActivationOffloadOptions& options)
      : compute_(compute),
        pool_(&host_pool(compute, options.pin_memory)),
        min_bytes_(options.min_bytes) {
    for (const Tensor& p : model.parameters()) weights_.insert(p.storage().get());
    for (const Quant4bitWeight* w : weights_4bit(model)) {
      for (const Tensor* t : {&w->packed, &w->absmax, &w->nested_absmax, &w->nested_code}) {
        if (t->defined()) weights_.insert(t->storage().get());
      }
    }
  }

  // Runs block `layer` with the hooks in force.
  Tensor run(int64_t layer, const std::function<Tensor()>& block) {
    if (layer == 0) by_layer_.clear();  // a new forward: the last one's entries are gone
    if (static_cast<int64_t>(by_layer_.size()) <= layer) by_layer_.resize(layer + 1);
    SavedTensorsHooksGuard hooks(
        [this, layer](const Tensor& t) -> std::any { return pack(t, layer); },
        [this](const std::any& packed) -> Tensor { return unpack(packed); });
    return block();
  }

 private:
  std::any pack(const Tensor& t, int64_t layer) {
    if (t.device() != compute_ || static_cast<int64_t>(t.nbytes()) < min_bytes_ ||
        weights_.count(t.storage().get())) {
      return t;
    }
    auto entry = std::make_shared<OffloadedActivation>();
    entry->layer = layer;
    {
      HostPoolScope scope(compute_, *pool_);
      MemoryCategoryScope category(MemoryCategory::activations);
      NoGradGuard no_grad;
      entry->host = Tensor::empty(t.shape(), t.dtype(), host_pool_device(compute_));
    }
    // Note [Offload on the copy stream]: the copy runs beside the next ops; t's memory and the
    // host block wait for it before they are reused.
    const StreamId compute = current_stream(compute_), copy = copy_stream(compute_);
    NoGradGuard no_grad;
    // A queued transfer reads contiguous memory. Every device makes the same temporary (on one
    // stream copy_ could take t as it is), so that the CPU's and the plan's peaks are the GPU's.
    const Tensor source = t.is_contiguous() ? t : t.contiguous();
    wait_stream(compute_, copy, compute);
    {
      StreamGuard on_copy(compute_, copy);
      entry->host.copy_async_(source);
    }
    if (copy != compute) {
      source.record_stream(copy);
      entry->host.record_stream(copy);
    }
    by_layer_[static_cast<size_t>(layer)].push_back(entry);
    return std::shared_ptr<OffloadedActivation>(entry);
  }

  Tensor unpack(const std::any& packed) {
    if (const Tensor* kept = std::any_cast<Tensor>(&packed)) return *kept;
    const auto& entry = std::any_cast<const std::shared_ptr<OffloadedActivation>&>(packed);
    Tensor out = entry->device.defined() ? std::move(entry->device) : fetch(*entry);
    entry->device = Tensor();
    entry->handed_out = true;
    // The compute stream reads `out` only after its own copy, not after the prefetches queued
    // later, which run beside this block's backward.
    if (entry->back) {
      entry->queues->wait_event(current_stream(compute_), *entry->back);
      entry->forget_copy_back();
    }
    prefetch(entry->layer - 1);
    return out;
  }

  // The tensor back on the compute device, queued on the copy stream (Note [Offload on the copy
  // stream]); allocated from the compute stream's pool, as the plan allocates it.
  Tensor fetch(OffloadedActivation& entry) const {
    MemoryCategoryScope category(MemoryCategory::activations);
    NoGradGuard no_grad;
    Tensor out = Tensor::empty(entry.host.shape(), entry.host.dtype(), compute_);
    const StreamId compute = current_stream(compute_), copy = copy_stream(compute_);
    wait_stream(compute_, copy, compute);  // out's memory may still be read by earlier kernels
    {
      StreamGuard on_copy(compute_, copy);
      out.copy_async_(entry.host);
    }
    if (copy != compute) {
      out.record_stream(copy);
      entry.host.record_stream(copy);
      entry.queues = &caching_allocator(compute_).device_allocator();
      entry.forget_copy_back();
      entry.back = entry.queues->record_event(copy);
    }
    return out;
  }

  void prefetch(int64_t layer) {
    if (layer < 0 || layer >= static_cast<int64_t>(by_layer_.size())) return;
    for (const std::weak_ptr<OffloadedActivation>& weak : by_layer_[static_cast<size_t>(layer)]) {
      const std::shared_ptr<OffloadedActivation> entry = weak.lock();
      if (entry && !entry->handed_out && !entry->device.defined()) entry->device = fetch(*entry);
    }
  }

  Device compute_;
  CachingAllocator* pool_;
  int64_t min_bytes_;
  std::unordered_set<const Storage*> weights_;  // by Storage: meta pools share addresses
  std::vector<std::vector<std::weak_ptr<OffloadedActivation>>> by_layer_;
};

}  // namespace

void enable_activation_offload(CausalLM& model, Device compute,
                               const ActivationOffloadOptions& options) {
  auto offloader = std::make_shared<ActivationOffloader>(model, compute, options);
  BlockRunners runners = model.block_runners();
  const BlockRunner inner = runners.block;
  runners.block = [offloader, inner](int64_t layer, const LayerForward& forward, const Tensor& x) {
    return offloader->run(layer, [&] { return inner ? inner(layer, forward, x) : forward(x); });
  };
  model.set_block_runners(std::move(runners));
}

}  // namespace headroom
