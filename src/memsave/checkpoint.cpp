// Checkpointed regions: the frame that records a region's forward, the hooks that pack handles,
// and the recompute that fills them. See Note [Activation checkpointing].
#include "memsave/checkpoint.h"

#include <any>
#include <map>
#include <memory>
#include <optional>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/saved_tensor.h"
#include "core/autocast_mode.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/storage.h"
#include "memory/memory_category.h"

namespace headroom {

namespace {

// Thrown by the recompute's pack hook once every tensor is back; caught by the recompute.
struct StopRecomputation {};
// Thrown once a kept op (must_save) has made its saves; caught by must_save.
struct StopKeptOp {};

struct TensorMetadata {
  Shape shape;
  DType dtype;
  Device device;
  bool operator==(const TensorMetadata&) const = default;
};

TensorMetadata metadata_of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

std::string describe(const TensorMetadata& m) {
  return str_cat("shape ", m.shape, ", ", dtype_name(m.dtype), ", ", m.device);
}

// What one backward pass recomputed: tensors by handle index, each handed out once.
struct Recomputation {
  std::vector<Tensor> tensors;
  std::vector<bool> unpacked;
  size_t counter = 0;  // saves made so far by the recompute
};

class Frame;

// What is active on this thread: the region being recorded or recomputed (innermost last).
struct ActiveRegion {
  Frame* frame;
  Recomputation* recomputation;  // null while recording the forward
};
thread_local std::vector<ActiveRegion> active_regions;

class ActiveRegionScope {
 public:
  ActiveRegionScope(Frame* frame, Recomputation* recomputation) {
    active_regions.push_back({frame, recomputation});
  }
  ~ActiveRegionScope() { active_regions.pop_back(); }
  ActiveRegionScope(const ActiveRegionScope&) = delete;
  ActiveRegionScope& operator=(const ActiveRegionScope&) = delete;
};

// Everything a region needs to be recomputed. Handles (Holder) own it; it owns no handle, so it
// is freed with the last node that saved through the region.
class Frame {
 public:
  Frame(CheckpointFunction fn, const std::vector<Tensor>& inputs, const CheckpointOptions& options)
      : fn_(std::move(fn)), inputs_(inputs), options_(options) {
    if (current_saved_tensor_hooks() && active_regions.empty()) {
      // Hooks around the checkpoint (activation offload) keep the inputs, as torch's region saves
      // them through the hooks in force outside it (transformers' checkpoint offload). Inside
      // another region the inputs are kept as they are, as before.
      for (const Tensor& t : inputs_) {
        saved_inputs_.emplace_back(t);
        input_requires_grad_.push_back(t.defined() && t.requires_grad());
      }
      inputs_.clear();
    }
    for (const Tensor& t : inputs_) {
      input_versions_.push_back(t.defined() ? t.storage()->version() : 0);
    }
    seed_ = default_generator().seed();
    offset_ = default_generator().offset();
    for (int i = 0; i < kNumDeviceTypes; ++i) {
      autocast_[i] = AutocastMode::get(static_cast<DeviceType>(i));
    }
  }

  // Forward: the handle index for a tensor the region saves.
  size_t record(const Tensor& t) {
    metadata_.push_back(metadata_of(t));
    alive_.push_back(true);
    return metadata_.size() - 1;
  }
  void release(size_t index) { alive_[index] = false; }

  // Forward: a kept op's output and the saves it spans.
  void keep(size_t start, const Tensor& out) {
    kept_.push_back({start, metadata_.size(), out.detach(), out.requires_grad()});
  }
  // The forward is over: drop kept outputs that the recompute will never reach (the last save
  // of the region comes before them), when it stops early.
  void finish_forward() {
    if (!options_.early_stop) return;
    for (Kept& k : kept_) {
      if (k.end == metadata_.size()) k.output = Tensor();
    }
  }

  Tensor unpack(size_t index) {
    uint64_t task = current_graph_task_id();
    const bool in_backward = task != 0;
    if (!in_backward) task = next_outside_task_++;  // an unpack outside backward recomputes alone
    auto [it, fresh] = recomputations_.try_emplace(task);
    if (fresh) {
      try {
        recompute(it->second);
      } catch (...) {
        recomputations_.erase(it);
        throw;
      }
    }
    Recomputation& rec = it->second;
    if (rec.unpacked[index]) {
      throw Error(str_cat("checkpoint: saved tensor ", index,
                          " of the region was unpacked twice "
                          "in one backward pass; a node may read each saved tensor once"));
    }
    rec.unpacked[index] = true;
    Tensor t = std::move(rec.tensors[index]);
    if (!in_backward) recomputations_.erase(it);
    return t;
  }

  // Recompute: a tensor saved by the re-run region.
  void recompute_saved(Recomputation& rec, const Tensor& t) {
    const size_t index = rec.counter++;
    if (index >= metadata_.size()) {
      throw ValueError(str_cat("checkpoint: the recompute saved more tensors than the forward (",
                               metadata_.size(),
                               "); the region must run the same ops when it "
                               "is recomputed"));
    }
    if (alive_[index]) rec.tensors[index] = t;
    if (options_.early_stop && rec.counter == metadata_.size()) throw StopRecomputation{};
    if (!kept_stack_.empty() && rec.counter == kept_[kept_stack_.back()].end) throw StopKeptOp{};
  }

  // must_save inside the region.
  Tensor run_kept(const TensorFunction& op, const Tensor& x, Recomputation* rec) {
    if (!rec) {
      const size_t start = metadata_.size();
      Tensor out = op(x);
      keep(start, out);
      return out;
    }
    const size_t k = next_kept_++;
    if (k >= kept_.size() || rec->counter != kept_[k].start) {
      throw ValueError(str_cat("checkpoint: kept op ", k, " is reached after ", rec->counter,
                               " saves in the recompute, not as in the forward; the region must "
                               "run the same ops when it is recomputed"));
    }
    if (kept_[k].end > kept_[k].start) {
      kept_stack_.push_back(k);
      try {
        op(x);
        kept_stack_.pop_back();
      } catch (const StopKeptOp&) {
        kept_stack_.pop_back();
      } catch (...) {
        kept_stack_.pop_back();
        throw;
      }
    }
    // A fresh leaf, so that the recomputed ops after it record (and save) as in the forward.
    Tensor out = kept_[k].output.detach();
    out.set_requires_grad(kept_[k].requires_grad);
    return out;
  }

  const CheckpointFunction& fn() const { return fn_; }

 private:
  struct Kept {
    size_t start, end;  // handle indices of the op's own saves: [start, end)
    Tensor output;
    bool requires_grad;
  };

  void recompute(Recomputation& rec) {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].defined() && inputs_[i].storage()->version() != input_versions_[i]) {
        throw Error(str_cat("checkpoint: input ", i, " of the region (shape ", inputs_[i].shape(),
                            ") was modified in place after the forward (version ",
                            input_versions_[i], ", now ", inputs_[i].storage()->version(),
                            "); the recompute would see other values"));
      }
    }
    rec.tensors.assign(metadata_.size(), Tensor());
    rec.unpacked.assign(metadata_.size(), false);
    next_kept_ = 0;
    {
      std::optional<DefaultGeneratorStateGuard> generator;
      if (options_.preserve_rng_state) generator.emplace(seed_, offset_);
      std::optional<Autocast> autocast[kNumDeviceTypes];
      for (int i = 0; i < kNumDeviceTypes; ++i) {
        autocast[i].emplace(static_cast<DeviceType>(i), autocast_[i].dtype, autocast_[i].enabled,
                            autocast_[i].cache_enabled);
      }
      EnableGradGuard grad;
      // What the recompute brings back are the forward's activations, now alive again.
      MemoryCategoryScope category(MemoryCategory::activations);
      // The recompute's own graph is never run backward: its nodes keep nothing.
      SavedTensorsHooksGuard hooks(
          [this, &rec](const Tensor& t) -> std::any {
            recompute_saved(rec, t);
            return {};
          },
          [](const std::any&) -> Tensor {
            throw Error(
                "checkpoint: the graph built while recomputing a checkpointed region "
                "cannot be run backward");
          });
      ActiveRegionScope active(this, &rec);
      try {
        if (saved_inputs_.empty()) {
          fn_(inputs_);
        } else {
          // Detached as saved; requiring grad as the forward's inputs did, so the recompute
          // records (and saves) what the forward recorded.
          std::vector<Tensor> inputs;
          for (size_t i = 0; i < saved_inputs_.size(); ++i) {
            Tensor input = saved_inputs_[i].unpack("checkpoint");
            if (input_requires_grad_[i]) {
              input = input.detach();
              input.set_requires_grad(true);
            }
            inputs.push_back(input);
          }
          fn_(inputs);
        }
      } catch (const StopRecomputation&) {
      }
    }
    if (rec.counter != metadata_.size()) {
      throw ValueError(str_cat("checkpoint: the forward saved ", metadata_.size(),
                               " tensors for backward but the recompute saved ", rec.counter,
                               "; the region must run the same ops when it is recomputed"));
    }
    if (!options_.determinism_check) return;
    for (size_t i = 0; i < metadata_.size(); ++i) {
      if (!rec.tensors[i].defined()) continue;
      const TensorMetadata recomputed = metadata_of(rec.tensors[i]);
      if (recomputed != metadata_[i]) {
        throw ValueError(
            str_cat("checkpoint: saved tensor ", i,
                    " of the region was recomputed with other metadata: "
                    "saved ",
                    describe(metadata_[i]), "; recomputed ", describe(recomputed),
                    ". The region must compute the same shapes and dtypes when it is recomputed "
                    "(determinism_check=false skips this check)"));
      }
    }
  }

  CheckpointFunction fn_;
  std::vector<Tensor> inputs_;
  std::vector<SavedTensor> saved_inputs_;  // instead of inputs_ under outer hooks
  std::vector<bool> input_requires_grad_;  // of saved_inputs_
  std::vector<uint32_t> input_versions_;
  CheckpointOptions options_;
  uint64_t seed_ = 0, offset_ = 0;
  AutocastDeviceState autocast_[kNumDeviceTypes];
  std::vector<TensorMetadata> metadata_;
  std::vector<bool> alive_;
  std::vector<Kept> kept_;
  std::map<uint64_t, Recomputation> recomputations_;
  uint64_t next_outside_task_ = uint64_t{1} << 63;
  size_t next_kept_ = 0;
  std::vector<size_t> kept_stack_;
};

// The packed value of a saved tensor: a handle into its region.
struct Holder {
  Holder(std::shared_ptr<Frame> f, size_t i) : frame(std::move(f)), index(i) {}
  ~Holder() { frame->release(index); }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
  std::shared_ptr<Frame> frame;
  size_t index;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  if (!fn) throw ValueError("checkpoint: fn is empty");
  if (!GradMode::is_enabled()) return fn(inputs);
  auto frame = std::make_shared<Frame>(fn, inputs, options);
  std::vector<Tensor> outputs;
  {
    SavedTensorsHooksGuard hooks(
        [frame](const Tensor& t) -> std::any {
          return std::make_shared<Holder>(frame, frame->record(t));
        },
        [](const std::any& packed) -> Tensor {
          const auto& holder = std::any_cast<const std::shared_ptr<Holder>&>(packed);
          return holder->frame->unpack(holder->index);
        });
    ActiveRegionScope active(frame.get(), nullptr);
    outputs = frame->fn()(inputs);
  }
  frame->finish_forward();
  return outputs;
}

Tensor checkpoint(const TensorFunction& fn, const Tensor& input, const CheckpointOptions& options) {
  if (!fn) throw ValueError("checkpoint: fn is empty");
  const std::vector<Tensor> outputs =
      checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                 {input}, options);
  return outputs[0];
}

Tensor checkpoint_sequential(const std::vector<TensorFunction>& functions, int64_t segments,
                             const Tensor& input, const CheckpointOptions& options) {
  const auto n = static_cast<int64_t>(functions.size());
  if (segments < 1 || segments > n) {
    throw ValueError(str_cat("checkpoint_sequential: segments ", segments, " must lie in [1, ", n,
                             "] (the number of functions)"));
  }
  const int64_t size = n / segments;
  // Each region keeps its own copy of its functions: it is recomputed after this call returns.
  auto run = [&functions](int64_t begin, int64_t end) {
    return [run_functions = std::vector<TensorFunction>(functions.begin() + begin,
                                                        functions.begin() + end)](const Tensor& x) {
      Tensor y = x;
      for (const TensorFunction& f : run_functions) y = f(y);
      return y;
    };
  };
  Tensor x = input;
  for (int64_t s = 0; s < segments - 1; ++s)
    x = checkpoint(run(s * size, (s + 1) * size), x, options);
  return run((segments - 1) * size, n)(x);
}

struct CheckpointRegionsHidden::Regions {
  std::vector<ActiveRegion> regions;
};

CheckpointRegionsHidden::CheckpointRegionsHidden() : hidden_(std::make_unique<Regions>()) {
  hidden_->regions.swap(active_regions);
}

CheckpointRegionsHidden::~CheckpointRegionsHidden() { active_regions.swap(hidden_->regions); }

Tensor must_save(const TensorFunction& op, const Tensor& x) {
  if (active_regions.empty()) return op(x);
  const ActiveRegion region = active_regions.back();
  return region.frame->run_kept(op, x, region.recomputation);
}

}  // namespace headroom
