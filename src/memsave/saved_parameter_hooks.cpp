// Parameters saved for backward kept as handles (SavedParameterHooks).
#include "memsave/saved_parameter_hooks.h"

#include <any>
#include <unordered_map>
#include <utility>

#include "core/storage.h"

namespace headroom {
namespace {

// What hooks around these packed, kept with them.
struct OuterPacked {
  std::shared_ptr<const SavedTensorHooks> hooks;
  std::any packed;
};

std::function<std::any(const Tensor&)> pack_parameters(
    const std::vector<Tensor>& parameters,
    std::function<std::shared_ptr<SavedParameter>(size_t)> save) {
  std::unordered_map<const Storage*, size_t> index;
  for (size_t i = 0; i < parameters.size(); ++i) index[parameters[i].storage().get()] = i;
  return [outer = current_saved_tensor_hooks(), index = std::move(index),
          save = std::move(save)](const Tensor& t) -> std::any {
    if (auto it = index.find(t.storage().get()); it != index.end()) return save(it->second);
    if (outer) return OuterPacked{outer, outer->pack(t)};
    return t;
  };
}

Tensor unpack_parameters(const std::any& packed) {
  if (const auto* saved = std::any_cast<std::shared_ptr<SavedParameter>>(&packed)) {
    return (*saved)->unpack();
  }
  if (const auto* outer = std::any_cast<OuterPacked>(&packed)) {
    return outer->hooks->unpack(outer->packed);
  }
  return std::any_cast<const Tensor&>(packed);
}

}  // namespace

SavedParameterHooks::SavedParameterHooks(
    const std::vector<Tensor>& parameters,
    std::function<std::shared_ptr<SavedParameter>(size_t index)> save)
    : guard_(pack_parameters(parameters, std::move(save)), unpack_parameters) {}

}  // namespace headroom
