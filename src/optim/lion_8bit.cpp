// Lion8bit: option checks, lazy state (8-bit or fp32 by size), the step's fp32 coefficients as
// bitsandbytes computes them, handed to the device's lion_8bit table (backend/lion_8bit_kernels.h).
#include "optim/lion_8bit.h"

#include "backend/lion_8bit_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "optim/bnb_8bit_states.h"

namespace headroom {

namespace {

void check_options(const Lion8bitOptions& o) {
  if (!(o.lr >= 0.0)) throw ValueError(str_cat("Lion8bit: Invalid learning rate: ", o.lr));
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0)) {
    throw ValueError(str_cat("Lion8bit: Invalid beta parameter at index 0: ", o.beta1));
  }
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0)) {
    throw ValueError(str_cat("Lion8bit: Invalid beta parameter at index 1: ", o.beta2));
  }
  if (!(o.weight_decay >= 0.0)) {
    throw ValueError(str_cat("Lion8bit: Invalid weight_decay value: ", o.weight_decay));
  }
  if (o.min_8bit_size < 0) {
    throw ValueError(str_cat("Lion8bit: min_8bit_size ", o.min_8bit_size, " must be >= 0"));
  }
}

// bitsandbytes passes lr, the betas and weight_decay to its kernels as fp32, which compute
// 1 - beta and 1 - lr * weight_decay in fp32.
BnbLionCoefficients coefficients(const Lion8bitOptions& o, double lr, double weight_decay) {
  const float lr_f = static_cast<float>(lr), wd_f = static_cast<float>(weight_decay);
  const float beta1 = static_cast<float>(o.beta1), beta2 = static_cast<float>(o.beta2);
  return {.lr = lr_f,
          .beta1 = beta1,
          .one_minus_beta1 = 1.0f - beta1,
          .beta2 = beta2,
          .one_minus_beta2 = 1.0f - beta2,
          .decay = 1.0f - lr_f * wd_f,
          .decays = wd_f > 0.0f};
}

}  // namespace

std::vector<StateTensor> Lion8bit::state_layout(const Shape& shape,
                                                const Lion8bitOptions& options) {
  if (shape.numel() < options.min_8bit_size) return {{"state1", shape, DType::f32}};
  return {{"state1", shape, DType::u8},
          {"absmax1", Shape{bnb_block_count(shape.numel())}, DType::f32}};
}

Lion8bit::Lion8bit(const std::vector<Tensor>& params, const Lion8bitOptions& options)
    : Lion8bit(numbered_params(params), options) {}

Lion8bit::Lion8bit(const std::vector<NamedTensor>& named_params, const Lion8bitOptions& options)
    : Lion8bit(std::vector<ParamGroup>{ParamGroup{.params = named_params}}, options) {}

Lion8bit::Lion8bit(std::vector<ParamGroup> groups, const Lion8bitOptions& options)
    : options_(options) {
  check_options(options_);
  auto check_group = [this](double lr, double weight_decay) {
    Lion8bitOptions checked = options_;
    checked.lr = lr;
    checked.weight_decay = weight_decay;
    check_options(checked);
  };
  auto check_param = [](const std::string& name, const Tensor& param) {
    check_bnb_param("Lion8bit", name, param);
  };
  set_param_groups(std::move(groups), options_.lr, options_.weight_decay, check_group, check_param);
  for (const ParamGroup& group : groups_) states_.emplace_back(group.params.size());
}

void Lion8bit::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const BnbLionCoefficients c = coefficients(options_, *groups_[g].lr, *groups_[g].weight_decay);
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& [name, param] = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      const Tensor grad = floating_grad(name, param.grad());
      const bool eight_bit = uses_8bit_state(param.numel());
      Lion8bitState& state = states_[g][i];
      if (!state.state1.defined()) {
        state.state1 = bnb_state_zeros(param, eight_bit);
        if (eight_bit) state.absmax1 = bnb_absmax_zeros(param);
      }
      ++state.step;
      if (eight_bit) {
        need_kernel("Lion8bit", param.device(), &Lion8bitKernels::update_8bit)(
            param, grad, state.state1, state.absmax1, c);
      } else {
        need_kernel("Lion8bit", param.device(), &Lion8bitKernels::update_32bit)(param, grad,
                                                                                state.state1, c);
      }
    }
  }
}

OptimizerStateDict Lion8bit::state_dict() const {
  OptimizerStateDict result{.meta = state_dict_meta(), .tensors = {}};
  nlohmann::json per_param = nlohmann::json::object();
  for_each_param([&](size_t g, size_t i, const std::string& key, const Tensor&) {
    const Lion8bitState& state = states_[g][i];
    if (!state.state1.defined()) return;
    per_param[key] = {{"step", state.step}};
    result.tensors.emplace_back(str_cat("state.", key, ".state1"), state.state1);
    if (state.absmax1.defined()) {
      result.tensors.emplace_back(str_cat("state.", key, ".absmax1"), state.absmax1);
    }
  });
  result.meta["state"] = std::move(per_param);
  return result;
}

void Lion8bit::load_state_dict(const OptimizerStateDict& saved) {
  load_state_dict_meta(saved.meta);
  std::vector<std::vector<Lion8bitState>> states;
  for (const ParamGroup& group : groups_) states.emplace_back(group.params.size());
  for_each_saved_state(saved, [&](size_t g, size_t i, const std::string& key, const Tensor& param,
                                  const nlohmann::json& entry) {
    const bool eight_bit = uses_8bit_state(param.numel());
    Lion8bitState& state = states[g][i];
    state.step = state_dict_step(entry, "step");
    const std::string prefix = str_cat("state.", key, ".");
    state.state1 = load_state_tensor(saved, prefix + "state1", param.shape(),
                                     eight_bit ? DType::u8 : DType::f32, param.device());
    if (eight_bit) {
      state.absmax1 =
          load_state_tensor(saved, prefix + "absmax1", Shape{bnb_block_count(param.numel())},
                            DType::f32, param.device());
    }
  });
  states_ = std::move(states);
}

const Lion8bitState& Lion8bit::state(size_t group, size_t index) const {
  if (group >= states_.size() || index >= states_[group].size()) {
    throw IndexError(str_cat("Lion8bit::state: no parameter ", index, " in group ", group));
  }
  return states_[group][index];
}

}  // namespace headroom
