// SGD: torch's checks, lazy momentum buffer, and the step's coefficients handed to the device's
// sgd table (backend/sgd_kernels.h; the CPU's kernel is backend/cpu/sgd.cpp).
#include "optim/sgd.h"

#include "backend/sgd_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/memory_category.h"

namespace headroom {

namespace {

void check_options(const SGDOptions& o) {
  if (!(o.lr >= 0.0)) throw ValueError(str_cat("SGD: Invalid learning rate: ", o.lr));
  if (!(o.momentum >= 0.0)) throw ValueError(str_cat("SGD: Invalid momentum value: ", o.momentum));
  if (!(o.weight_decay >= 0.0)) {
    throw ValueError(str_cat("SGD: Invalid weight_decay value: ", o.weight_decay));
  }
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) {
    throw ValueError(
        str_cat("SGD: Nesterov momentum requires a momentum and zero dampening "
                "(momentum=",
                o.momentum, ", dampening=", o.dampening, ")"));
  }
}

using SGDCoefficients = SgdKernels::Coefficients;

}  // namespace

std::vector<StateTensor> SGD::state_layout(const Shape& shape, const SGDOptions& options) {
  if (options.momentum == 0.0) return {};
  return {{"momentum_buffer", shape, DType::f32}};
}

SGD::SGD(const std::vector<Tensor>& params, const SGDOptions& options)
    : SGD(numbered_params(params), options) {}

SGD::SGD(const std::vector<NamedTensor>& named_params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{ParamGroup{.params = named_params}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options) : options_(options) {
  check_options(options_);
  set_param_groups(std::move(groups), options_.lr, options_.weight_decay);
  for (const ParamGroup& group : groups_) states_.emplace_back(group.params.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const SGDCoefficients c{.neg_lr = static_cast<float>(-*groups_[g].lr),
                            .weight_decay = static_cast<float>(*groups_[g].weight_decay),
                            .momentum = static_cast<float>(options_.momentum),
                            .one_minus_dampening = static_cast<float>(1.0 - options_.dampening),
                            .nesterov = options_.nesterov};
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& [param_name, param] = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      SGDState& state = states_[g][i];
      const bool first = state.step == 0 || !state.momentum_buffer.defined();
      if (options_.momentum != 0.0 && !state.momentum_buffer.defined()) {
        MemoryCategoryScope states(MemoryCategory::optimizer_states);
        state.momentum_buffer = Tensor::empty(param.shape(), DType::f32, param.device());
      }
      ++state.step;
      const Tensor grad = floating_grad(param_name, param.grad());
      need_kernel("SGD", param.device(), &SgdKernels::update)(param, grad, state.momentum_buffer,
                                                              first, c);
    }
  }
}

OptimizerStateDict SGD::state_dict() const {
  OptimizerStateDict result{.meta = state_dict_meta(), .tensors = {}};
  nlohmann::json per_param = nlohmann::json::object();
  for_each_param([&](size_t g, size_t i, const std::string& key, const Tensor&) {
    const SGDState& state = states_[g][i];
    if (state.step == 0) return;
    per_param[key] = {{"step", state.step}};
    if (state.momentum_buffer.defined()) {
      result.tensors.emplace_back(str_cat("state.", key, ".momentum_buffer"),
                                  state.momentum_buffer);
    }
  });
  result.meta["state"] = std::move(per_param);
  return result;
}

void SGD::load_state_dict(const OptimizerStateDict& saved) {
  load_state_dict_meta(saved.meta);
  std::vector<std::vector<SGDState>> states;
  for (const ParamGroup& group : groups_) states.emplace_back(group.params.size());
  for_each_saved_state(saved, [&](size_t g, size_t i, const std::string& key, const Tensor& param,
                                  const nlohmann::json& entry) {
    states[g][i].step = state_dict_step(entry, "step");
    if (options_.momentum != 0.0) {
      states[g][i].momentum_buffer =
          load_state_tensor(saved, str_cat("state.", key, ".momentum_buffer"), param.shape(),
                            DType::f32, param.device());
    }
  });
  states_ = std::move(states);
}

const SGDState& SGD::state(size_t group, size_t index) const {
  if (group >= states_.size() || index >= states_[group].size()) {
    throw IndexError(str_cat("SGD::state: no parameter ", index, " in group ", group));
  }
  return states_[group][index];
}

}  // namespace headroom
