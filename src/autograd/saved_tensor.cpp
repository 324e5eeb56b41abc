// Saving tensors for backward, through the thread's saved-tensor hooks when there are any.
#include "autograd/saved_tensor.h"

#include "core/error.h"
#include "core/storage.h"

namespace headroom {

namespace {
thread_local std::shared_ptr<const SavedTensorHooks> current_hooks;
}

SavedTensorsHooksGuard::SavedTensorsHooksGuard(std::function<std::any(const Tensor&)> pack,
                                               std::function<Tensor(const std::any&)> unpack)
    : previous_(current_hooks) {
  if (!pack || !unpack) throw ValueError("saved_tensors_hooks: pack and unpack must both be given");
  current_hooks = std::make_shared<const SavedTensorHooks>(
      SavedTensorHooks{std::move(pack), std::move(unpack)});
}

SavedTensorsHooksGuard::~SavedTensorsHooksGuard() { current_hooks = previous_; }

std::shared_ptr<const SavedTensorHooks> current_saved_tensor_hooks() { return current_hooks; }

SavedTensor::SavedTensor(const Tensor& tensor) : defined_(tensor.defined()) {
  if (!defined_) return;
  Tensor detached = tensor.detach();
  hooks_ = current_hooks;
  if (hooks_) {
    packed_ = hooks_->pack(detached);
  } else {
    version_ = detached.storage()->version();
    data_ = std::move(detached);
  }
}

Tensor SavedTensor::unpack(const std::string& node) const {
  if (released_) {
    throw Error(str_cat(node,
                        ": trying to backward through the graph a second time (its saved "
                        "tensors were freed after the first backward); pass retain_graph=true "
                        "to the first backward if you need a second"));
  }
  if (!defined_) return Tensor();
  if (hooks_) return hooks_->unpack(packed_);
  if (data_.storage()->version() != version_) {
    throw Error(str_cat(node, ": a tensor it saved for backward (shape ", data_.shape(),
                        ") was modified in place after it was saved (version ", version_, ", now ",
                        data_.storage()->version(), ")"));
  }
  return data_;
}

void SavedTensor::release() {
  data_ = Tensor();
  packed_.reset();
  hooks_.reset();
  released_ = true;
}

}  // namespace headroom
