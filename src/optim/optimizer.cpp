// Optimizer: the parts shared by every optimizer (gradients, learning rates per group).
#include "optim/optimizer.h"

#include <cmath>

#include <unordered_set>

#include "core/error.h"
#include "core/tensor.h"
#include "memory/memory_category.h"

namespace headroom {

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& group : groups_) {
    for (const auto& [name, param] : group.params) {
      if (set_to_none) {
        param.set_grad(Tensor());
      } else if (Tensor grad = param.grad(); grad.defined()) {
        grad.zero_();
      }
    }
  }
}

double Optimizer::group_lr(size_t group) const {
  if (group >= groups_.size()) {
    throw IndexError(
        str_cat(name(), ": no parameter group ", group, " (", groups_.size(), " groups)"));
  }
  return groups_[group].lr.value_or(0.0);
}

void Optimizer::set_group_lr(size_t group, double lr) {
  if (group >= groups_.size()) {
    throw IndexError(
        str_cat(name(), ": no parameter group ", group, " (", groups_.size(), " groups)"));
  }
  check_lr(lr);
  groups_[group].lr = lr;
}

double Optimizer::lr() const { return groups_.empty() ? 0.0 : group_lr(0); }

void Optimizer::set_lr(double lr) {
  check_lr(lr);
  for (ParamGroup& group : groups_) group.lr = lr;
}

OptimizerStateDict Optimizer::state_dict() const {
  throw NotImplementedError(str_cat(name(), ": state_dict is not implemented"));
}

void Optimizer::load_state_dict(const OptimizerStateDict&) {
  throw NotImplementedError(str_cat(name(), ": load_state_dict is not implemented"));
}

void Optimizer::set_param_groups(
    std::vector<ParamGroup> groups, double default_lr, double default_weight_decay,
    const std::function<void(double, double)>& check_group,
    const std::function<void(const std::string&, const Tensor&)>& check_param) {
  groups_ = std::move(groups);
  std::unordered_set<const void*> seen;  // a leaf's AutogradMeta, or its data when it has none
  for (ParamGroup& group : groups_) {
    group.lr = group.lr.value_or(default_lr);
    group.weight_decay = group.weight_decay.value_or(default_weight_decay);
    check_group(*group.lr, *group.weight_decay);
    for (const auto& [param_name, param] : group.params) {
      check_param(param_name, param);
      const void* identity = param.autograd_meta() != nullptr
                                 ? static_cast<const void*>(param.autograd_meta())
                                 : param.data_ptr();
      if (!seen.insert(identity).second) {
        throw ValueError(str_cat(name(), ": parameter '", param_name,
                                 "' appears more than once in the parameter groups"));
      }
    }
  }
}

nlohmann::json Optimizer::state_dict_meta() const {
  nlohmann::json groups = nlohmann::json::array();
  for (const ParamGroup& group : groups_) {
    nlohmann::json names = nlohmann::json::array();
    for (const auto& [param_name, param] : group.params) names.push_back(param_name);
    groups.push_back({{"lr", group.lr.value_or(0.0)},
                      {"weight_decay", group.weight_decay.value_or(0.0)},
                      {"params", std::move(names)}});
  }
  return {{"optimizer", name()}, {"param_groups", std::move(groups)}};
}

void Optimizer::load_state_dict_meta(const nlohmann::json& meta) {
  const std::string saved = meta.value("optimizer", std::string());
  if (saved != name()) {
    throw ValueError(str_cat(name(), ": load_state_dict: the state is of optimizer '", saved,
                             "', not '", name(), "'"));
  }
  const nlohmann::json& groups = state_dict_entry(meta, "param_groups");
  if (!groups.is_array() || groups.size() != groups_.size()) {
    throw ValueError(str_cat(name(), ": load_state_dict: ", groups.size(),
                             " parameter groups saved, this optimizer has ", groups_.size()));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const nlohmann::json& names = state_dict_entry(groups[g], "params");
    if (names.size() != groups_[g].params.size()) {
      throw ValueError(str_cat(name(), ": load_state_dict: group ", g, " holds ", names.size(),
                               " parameters saved, ", groups_[g].params.size(), " here"));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i].get<std::string>() != groups_[g].params[i].first) {
        throw ValueError(str_cat(name(), ": load_state_dict: parameter ", i, " of group ", g,
                                 " is '", names[i].get<std::string>(), "' saved, '",
                                 groups_[g].params[i].first, "' here"));
      }
    }
  }
  // Checked before any is applied, with the constructors' rules (check_lr; weight_decay >= 0).
  std::vector<std::pair<double, double>> saved_groups;  // lr, weight_decay
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double lr = state_dict_number(groups[g], "lr", 0.0);
    check_lr(lr);
    saved_groups.emplace_back(lr, state_dict_number(groups[g], "weight_decay", 0.0));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    set_group_lr(g, saved_groups[g].first);
    groups_[g].weight_decay = saved_groups[g].second;
  }
}

int64_t Optimizer::state_dict_step(const nlohmann::json& meta, const std::string& key) const {
  const nlohmann::json& value = state_dict_entry(meta, key);
  constexpr int64_t kLimit = int64_t{1} << 62;
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kLimit) {
    throw ValueError(str_cat(name(), ": load_state_dict: '", key, "' is ", value.dump(),
                             ", expected an integer in 0..", kLimit));
  }
  return value.get<int64_t>();
}

uint64_t Optimizer::state_dict_unsigned(const nlohmann::json& meta, const std::string& key) const {
  const nlohmann::json& value = state_dict_entry(meta, key);
  if (!value.is_number_unsigned()) {
    throw ValueError(str_cat(name(), ": load_state_dict: '", key, "' is ", value.dump(),
                             ", expected an integer in 0..2^64-1"));
  }
  return value.get<uint64_t>();
}

double Optimizer::state_dict_number(const nlohmann::json& meta, const std::string& key,
                                    double min) const {
  const nlohmann::json& value = state_dict_entry(meta, key);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < min) {
    throw ValueError(str_cat(name(), ": load_state_dict: '", key, "' is ", value.dump(),
                             ", expected a finite number >= ", min));
  }
  return value.get<double>();
}

const nlohmann::json& Optimizer::state_dict_entry(const nlohmann::json& meta,
                                                  const std::string& key) const {
  if (!meta.is_object() || !meta.contains(key)) {
    throw ValueError(str_cat(name(), ": load_state_dict: the state has no entry '", key, "'"));
  }
  return meta[key];
}

Tensor Optimizer::load_state_tensor(const OptimizerStateDict& state, const std::string& key,
                                    const Shape& shape, DType dtype, Device device) const {
  for (const auto& [tensor_name, tensor] : state.tensors) {
    if (tensor_name != key) continue;
    if (tensor.shape() != shape || tensor.dtype() != dtype) {
      throw ValueError(str_cat(name(), ": load_state_dict: '", key, "' is ",
                               dtype_name(tensor.dtype()), tensor.shape(), ", expected ",
                               dtype_name(dtype), shape));
    }
    MemoryCategoryScope states(MemoryCategory::optimizer_states);
    Tensor copy = Tensor::empty(shape, dtype, device);
    copy.copy_(tensor);
    return copy;
  }
  throw ValueError(str_cat(name(), ": load_state_dict: the state has no tensor '", key, "'"));
}

void Optimizer::for_each_param(const ParamVisitor& fn) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      fn(g, i, str_cat(g, ".", i), groups_[g].params[i].second);
    }
  }
}

void Optimizer::for_each_saved_state(const OptimizerStateDict& saved,
                                     const SavedStateVisitor& fn) const {
  const nlohmann::json& per_param = state_dict_entry(saved.meta, "state");
  for_each_param([&](size_t g, size_t i, const std::string& key, const Tensor& param) {
    if (per_param.contains(key)) fn(g, i, key, param, per_param[key]);
  });
}

void Optimizer::set_param_groups(std::vector<ParamGroup> groups, double default_lr,
                                 double default_weight_decay) {
  auto check_group = [this](double lr, double weight_decay) {
    check_lr(lr);
    if (!(weight_decay >= 0.0)) {
      throw ValueError(str_cat(name(), ": Invalid weight_decay value: ", weight_decay));
    }
  };
  auto check_param = [this](const std::string& param_name, const Tensor& param) {
    if (!param.defined()) {
      throw ValueError(str_cat(name(), ": parameter '", param_name, "' is undefined"));
    }
    if (param.dtype() != DType::f32 && param.dtype() != DType::bf16) {
      throw NotImplementedError(str_cat(name(), ": parameter '", param_name, "' is ",
                                        dtype_name(param.dtype()),
                                        "; only f32 and bf16 parameters are supported"));
    }
    if (!param.is_leaf()) {
      throw ValueError(str_cat(name(), ": can't optimize a non-leaf tensor ('", param_name, "')"));
    }
    if (!param.is_contiguous()) {
      throw ValueError(str_cat(name(), ": parameter '", param_name, "' is not contiguous"));
    }
  };
  set_param_groups(std::move(groups), default_lr, default_weight_decay, check_group, check_param);
}

Tensor Optimizer::floating_grad(const std::string& param_name, const Tensor& grad) const {
  if (grad.dtype() != DType::f32 && grad.dtype() != DType::bf16 && grad.dtype() != DType::f16) {
    throw NotImplementedError(str_cat(name(), ": the gradient of '", param_name, "' is ",
                                      dtype_name(grad.dtype()),
                                      "; only f32, bf16 and f16 gradients are supported"));
  }
  return grad.contiguous();
}

void Optimizer::check_lr(double lr) const {
  if (!(lr >= 0.0)) throw ValueError(str_cat(name(), ": Invalid learning rate: ", lr));
}

}  // namespace headroom
