// Lion: option checks, lazy state, and the step's coefficients handed to the device's lion table
// (backend/lion_kernels.h; the CPU's kernel is backend/cpu/lion.cpp, Note [Lion update]).
#include "optim/lion.h"

#include "backend/lion_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/memory_category.h"

namespace headroom {

namespace {

void check_options(const LionOptions& o) {
  if (!(o.lr >= 0.0)) throw ValueError(str_cat("Lion: Invalid learning rate: ", o.lr));
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0)) {
    throw ValueError(str_cat("Lion: Invalid beta parameter at index 0: ", o.beta1));
  }
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0)) {
    throw ValueError(str_cat("Lion: Invalid beta parameter at index 1: ", o.beta2));
  }
  if (!(o.weight_decay >= 0.0)) {
    throw ValueError(str_cat("Lion: Invalid weight_decay value: ", o.weight_decay));
  }
}

using LionCoefficients = LionKernels::Coefficients;  // See Note [Lion update]

}  // namespace

std::vector<StateTensor> Lion::state_layout(const Shape& shape, const LionOptions&) {
  return {{"exp_avg", shape, DType::f32}};
}

Lion::Lion(const std::vector<Tensor>& params, const LionOptions& options)
    : Lion(numbered_params(params), options) {}

Lion::Lion(const std::vector<NamedTensor>& named_params, const LionOptions& options)
    : Lion(std::vector<ParamGroup>{ParamGroup{.params = named_params}}, options) {}

Lion::Lion(std::vector<ParamGroup> groups, const LionOptions& options) : options_(options) {
  check_options(options_);
  set_param_groups(std::move(groups), options_.lr, options_.weight_decay);
  for (const ParamGroup& group : groups_) states_.emplace_back(group.params.size());
}

void Lion::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double lr = *groups_[g].lr;
    const LionCoefficients c{.decay = static_cast<float>(1.0 - lr * *groups_[g].weight_decay),
                             .lr = static_cast<float>(lr),
                             .beta1 = static_cast<float>(options_.beta1),
                             .one_minus_beta1 = static_cast<float>(1.0 - options_.beta1),
                             .beta2 = static_cast<float>(options_.beta2),
                             .one_minus_beta2 = static_cast<float>(1.0 - options_.beta2)};
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& [param_name, param] = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      LionState& state = states_[g][i];
      if (!state.exp_avg.defined()) {
        MemoryCategoryScope states(MemoryCategory::optimizer_states);
        state.exp_avg = Tensor::zeros(param.shape(), DType::f32, param.device());
      }
      ++state.step;
      const Tensor grad = floating_grad(param_name, param.grad());
      need_kernel("Lion", param.device(), &LionKernels::update)(param, grad, state.exp_avg, c);
    }
  }
}

OptimizerStateDict Lion::state_dict() const {
  OptimizerStateDict result{.meta = state_dict_meta(), .tensors = {}};
  nlohmann::json per_param = nlohmann::json::object();
  for_each_param([&](size_t g, size_t i, const std::string& key, const Tensor&) {
    const LionState& state = states_[g][i];
    if (!state.exp_avg.defined()) return;
    per_param[key] = {{"step", state.step}};
    result.tensors.emplace_back(str_cat("state.", key, ".exp_avg"), state.exp_avg);
  });
  result.meta["state"] = std::move(per_param);
  return result;
}

void Lion::load_state_dict(const OptimizerStateDict& saved) {
  load_state_dict_meta(saved.meta);
  std::vector<std::vector<LionState>> states;
  for (const ParamGroup& group : groups_) states.emplace_back(group.params.size());
  for_each_saved_state(saved, [&](size_t g, size_t i, const std::string& key, const Tensor& param,
                                  const nlohmann::json& entry) {
    states[g][i].step = state_dict_step(entry, "step");
    states[g][i].exp_avg = load_state_tensor(saved, str_cat("state.", key, ".exp_avg"),
                                             param.shape(), DType::f32, param.device());
  });
  states_ = std::move(states);
}

const LionState& Lion::state(size_t group, size_t index) const {
  if (group >= states_.size() || index >= states_[group].size()) {
    throw IndexError(str_cat("Lion::state: no parameter ", index, " in group ", group));
  }
  return states_[group][index];
}

}  // namespace headroom
