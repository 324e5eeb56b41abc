// Tensors an op keeps for its backward, and the pack / unpack hooks that decide how they are
// kept (torch.autograd.graph.saved_tensors_hooks). See Note [Saved-tensor hooks].
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"

namespace headroom {

// Note [Saved-tensor hooks]
// When an op saves a tensor for backward while hooks are installed on this thread, the innermost
// hooks' pack(tensor) runs at once and its result is kept instead of the tensor; backward calls
// unpack(result) to get a tensor back. Activation checkpointing packs a handle and recomputes on
// unpack; CPU offload packs a host copy and copies it back on unpack. The hooks in force at save
// time are the ones used at unpack time, whatever is installed then. Unpack may run more than
// once per saved tensor (retain_graph); packed values are freed when the node releases them.
struct SavedTensorHooks {
  std::function<std::any(const Tensor&)> pack;
  std::function<Tensor(const std::any&)> unpack;
};

// Installs hooks for the scope, innermost first, as `with saved_tensors_hooks(pack, unpack):`.
class SavedTensorsHooksGuard {
 public:
  SavedTensorsHooksGuard(std::function<std::any(const Tensor&)> pack,
                         std::function<Tensor(const std::any&)> unpack);
  ~SavedTensorsHooksGuard();
  SavedTensorsHooksGuard(const SavedTensorsHooksGuard&) = delete;
  SavedTensorsHooksGuard& operator=(const SavedTensorsHooksGuard&) = delete;

 private:
  std::shared_ptr<const SavedTensorHooks> previous_;
};

// The hooks in force on this thread (null when none).
std::shared_ptr<const SavedTensorHooks> current_saved_tensor_hooks();

class SavedTensor {
 public:
  SavedTensor() = default;
  // Keeps `tensor` without its autograd state (no reference cycle through grad_fn), through the
  // current hooks if any. An undefined tensor is saved as undefined.
  explicit SavedTensor(const Tensor& tensor);

  // The tensor back. Throws when it was released, or when its data was changed in place after it
  // was saved (`node` names the op in the message).
  Tensor unpack(const std::string& node) const;
  void release();
  bool released() const { return released_; }

 private:
  Tensor data_;
  std::shared_ptr<const SavedTensorHooks> hooks_;
  std::any packed_;
  uint32_t version_ = 0;
  bool defined_ = false;
  bool released_ = false;
};

}  // namespace headroom
