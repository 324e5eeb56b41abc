// Saved-tensor hooks that keep a block's parameters as handles while the block runs, for code
// that moves the parameters away between uses (parameter offload, ZeRO-3's sharding).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "autograd/saved_tensor.h"

namespace headroom {

// What a saved parameter is kept as: backward's unpack asks it for the parameter's data again,
// and its destructor tells its owner that one fewer node holds the parameter.
class SavedParameter {
 public:
  virtual ~SavedParameter() = default;
  virtual Tensor unpack() = 0;
};

// For the scope, innermost of all hooks: a tensor saved for backward that lies on the storage of
// parameters[i] is kept as save(i) (by Storage: meta pools share addresses); any other goes on to
// the hooks around these (activation offload, a checkpoint), or is kept as it is without them.
class SavedParameterHooks {
 public:
  SavedParameterHooks(const std::vector<Tensor>& parameters,
                      std::function<std::shared_ptr<SavedParameter>(size_t index)> save);
  SavedParameterHooks(const SavedParameterHooks&) = delete;
  SavedParameterHooks& operator=(const SavedParameterHooks&) = delete;

 private:
  SavedTensorsHooksGuard guard_;
};

}  // namespace headroom
