// Parameter collection and mode switching for Module trees.
#include "nn/module.h"

#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/grad_mode.h"

namespace headroom {

void Module::register_parameter(const std::string& name, Tensor& slot, const Tensor& value) {
  value.set_requires_grad(true);
  slot = value;
  parameters_.emplace_back(name, &slot);
}

void Module::unregister_parameter(const std::string& name) {
  for (auto it = parameters_.begin(); it != parameters_.end(); ++it) {
    if (it->first == name) {
      parameters_.erase(it);
      return;
    }
  }
  throw ValueError(str_cat("no parameter named '", name, "' to unregister"));
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, tensor] : own_buffers()) out.emplace_back(name, tensor);
  for (const auto& [name, child] : children_) {
    // An unnamed child (an adapter) puts its buffers beside this module's own.
    for (auto& [n, t] : child->named_buffers()) {
      out.emplace_back(name.empty() ? n : name + "." + n, std::move(t));
    }
  }
  return out;
}

void Module::collect(const std::string& prefix,
                     std::vector<std::pair<std::string, Tensor*>>& out) const {
  for (const auto& [name, slot] : parameters_) out.emplace_back(prefix + name, slot);
  for (const auto& [name, child] : children_) {
    child->collect(name.empty() ? prefix : prefix + name + ".", out);
  }
}

void Module::remove_child(const Module* child) {
  std::erase_if(children_, [child](const auto& entry) { return entry.second.get() == child; });
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_) {
    for (auto& [path, module] : child->named_modules()) {
      const std::string joined = name.empty() ? path : path.empty() ? name : name + "." + path;
      out.emplace_back(joined, module);
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor*>> all;
  collect("", all);
  std::vector<std::pair<std::string, Tensor>> unique;
  std::unordered_set<const AutogradMeta*> seen;
  for (auto& [name, slot] : all) {
    if (seen.insert(slot->autograd_meta()).second) unique.emplace_back(std::move(name), *slot);
  }
  return unique;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameter_slots() {
  std::vector<std::pair<std::string, Tensor*>> all, unique;
  collect("", all);
  std::unordered_set<const AutogradMeta*> seen;
  for (auto& [name, slot] : all) {
    if (seen.insert(slot->autograd_meta()).second) unique.emplace_back(std::move(name), slot);
  }
  return unique;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(tensor);
  return out;
}

Tensor Module::parameter(const std::string& name) const {
  for (auto& [n, tensor] : named_parameters()) {
    if (n == name) return tensor;
  }
  throw ValueError(str_cat("no parameter named '", name, "'"));
}

int64_t Module::num_parameters() const {
  int64_t total = 0;
  for (auto& [name, tensor] : named_parameters()) total += tensor.numel();
  return total;
}

void Module::to(DType dtype, bool recurse) {
  NoGradGuard no_grad;
  // Slots holding one tensor (tied weights registered twice) get one converted tensor.
  std::unordered_map<const AutogradMeta*, Tensor> converted;
  std::vector<std::pair<std::string, Tensor*>> slots;
  if (recurse) {
    collect("", slots);
  } else {
    slots = parameters_;
  }
  for (const auto& [name, slot] : slots) {
    if (!is_floating(slot->dtype()) || slot->dtype() == dtype) continue;
    auto [it, inserted] = converted.try_emplace(slot->autograd_meta());
    if (inserted) {
      it->second = slot->detach().to(dtype);
      it->second.set_requires_grad(slot->requires_grad());
    }
    *slot = it->second;
  }
}

void Module::materialize_parameters(
    const std::function<Tensor(const std::string& name, const Tensor& current)>& make) {
  NoGradGuard no_grad;
  std::unordered_map<const AutogradMeta*, Tensor> made;
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", slots);
  for (const auto& [name, slot] : slots) {
    auto [it, inserted] = made.try_emplace(slot->autograd_meta());
    if (inserted) {
      it->second = make(name, *slot);
      if (it->second.defined()) it->second.set_requires_grad(true);
    }
    if (it->second.defined()) *slot = it->second;
  }
}

void Module::train(bool mode) {
  training_ = mode;
  for (auto& [name, child] : children_) child->train(mode);
}

}  // namespace headroom
