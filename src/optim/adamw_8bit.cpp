// AdamW8bit: option checks, lazy state (8-bit or fp32 by size), the step's fp32 coefficients as
// bitsandbytes computes them, handed to the device's adamw_8bit table
// (backend/adamw_8bit_kernels.h).
#include "optim/adamw_8bit.h"

#include <cmath>

#include "backend/adamw_8bit_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "optim/adamw.h"
#include "optim/bnb_8bit_states.h"

namespace headroom {

namespace {

void check_options(const AdamW8bitOptions& o) {
  check_adam_hyperparameters("AdamW8bit", o.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
  if (o.min_8bit_size < 0) {
    throw ValueError(str_cat("AdamW8bit: min_8bit_size ", o.min_8bit_size, " must be >= 0"));
  }
}

void check_param(const std::string& name, const Tensor& param) {
  check_bnb_param("AdamW8bit", name, param);
}

// bitsandbytes passes lr, betas, eps and weight_decay to its kernels as fp32 and computes the
// bias corrections there (powf; here pow in double, rounded once, which is within an ulp).
BnbAdamCoefficients coefficients(const AdamW8bitOptions& o, double lr, double weight_decay,
                                 int64_t step) {
  const float beta1 = static_cast<float>(o.beta1), beta2 = static_cast<float>(o.beta2);
  const float lr_f = static_cast<float>(lr);
  const float correction1 =
      1.0f - static_cast<float>(std::pow(static_cast<double>(beta1), static_cast<double>(step)));
  const float correction2 = std::sqrt(
      1.0f - static_cast<float>(std::pow(static_cast<double>(beta2), static_cast<double>(step))));
  return {.beta1 = beta1,
          .one_minus_beta1 = 1.0f - beta1,
          .beta2 = beta2,
          .one_minus_beta2 = 1.0f - beta2,
          .eps_correction2 = static_cast<float>(o.eps) * correction2,
          .step_size = -lr_f * correction2 / correction1,
          .decay = 1.0f - lr_f * static_cast<float>(weight_decay)};
}

}  // namespace

std::vector<StateTensor> AdamW8bit::state_layout(const Shape& shape,
                                                 const AdamW8bitOptions& options) {
  if (shape.numel() < options.min_8bit_size) {
    return {{"state1", shape, DType::f32}, {"state2", shape, DType::f32}};
  }
  const Shape blocks{bnb_block_count(shape.numel())};
  return {{"state1", shape, DType::u8},
          {"state2", shape, DType::u8},
          {"absmax1", blocks, DType::f32},
          {"absmax2", blocks, DType::f32}};
}

AdamW8bit::AdamW8bit(const std::vector<Tensor>& params, const AdamW8bitOptions& options)
    : AdamW8bit(numbered_params(params), options) {}

AdamW8bit::AdamW8bit(const std::vector<NamedTensor>& named_params, const AdamW8bitOptions& options)
    : AdamW8bit(std::vector<ParamGroup>{ParamGroup{.params = named_params}}, options) {}

AdamW8bit::AdamW8bit(std::vector<ParamGroup> groups, const AdamW8bitOptions& options)
    : options_(options) {
  check_options(options_);
  auto check_group = [this](double lr, double weight_decay) {
    check_adam_hyperparameters("AdamW8bit", lr, options_.beta1, options_.beta2, options_.eps,
                               weight_decay);
  };
  set_param_groups(std::move(groups), options_.lr, options_.weight_decay, check_group, check_param);
  for (const ParamGroup& group : groups_) states_.emplace_back(group.params.size());
}

void AdamW8bit::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& [name, param] = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      const Tensor grad = floating_grad(name, param.grad());
      const bool eight_bit = uses_8bit_state(param.numel());
      AdamW8bitState& state = states_[g][i];
      if (!state.state1.defined()) {
        state.state1 = bnb_state_zeros(param, eight_bit);
        state.state2 = bnb_state_zeros(param, eight_bit);
        if (eight_bit) {
          state.absmax1 = bnb_absmax_zeros(param);
          state.absmax2 = bnb_absmax_zeros(param);
        }
      }
      ++state.step;
      const BnbAdamCoefficients c =
          coefficients(options_, *groups_[g].lr, *groups_[g].weight_decay, state.step);
      if (eight_bit) {
        need_kernel("AdamW8bit", param.device(), &AdamW8bitKernels::update_8bit)(
            param, grad, state.state1, state.state2, state.absmax1, state.absmax2, c);
      } else {
        need_kernel("AdamW8bit", param.device(), &AdamW8bitKernels::update_32bit)(
            param, grad, state.state1, state.state2, c);
      }
    }
  }
}

void AdamW8bit::check_lr(double lr) const {
  AdamW8bitOptions checked = options_;
  checked.lr = lr;
  check_options(checked);
}

OptimizerStateDict AdamW8bit::state_dict() const {
  OptimizerStateDict result{.meta = state_dict_meta(), .tensors = {}};
  nlohmann::json per_param = nlohmann::json::object();
  for_each_param([&](size_t g, size_t i, const std::string& key, const Tensor&) {
    const AdamW8bitState& state = states_[g][i];
    if (!state.state1.defined()) return;
    per_param[key] = {{"step", state.step}};
    result.tensors.emplace_back(str_cat("state.", key, ".state1"), state.state1);
    result.tensors.emplace_back(str_cat("state.", key, ".state2"), state.state2);
    if (state.absmax1.defined()) {
      result.tensors.emplace_back(str_cat("state.", key, ".absmax1"), state.absmax1);
      result.tensors.emplace_back(str_cat("state.", key, ".absmax2"), state.absmax2);
    }
  });
  result.meta["state"] = std::move(per_param);
  return result;
}

void AdamW8bit::load_state_dict(const OptimizerStateDict& saved) {
  load_state_dict_meta(saved.meta);
  std::vector<std::vector<AdamW8bitState>> states;
  for (const ParamGroup& group : groups_) states.emplace_back(group.params.size());
  for_each_saved_state(saved, [&](size_t g, size_t i, const std::string& key, const Tensor& param,
                                  const nlohmann::json& entry) {
    const bool eight_bit = uses_8bit_state(param.numel());
    const DType dtype = eight_bit ? DType::u8 : DType::f32;
    AdamW8bitState& state = states[g][i];
    state.step = state_dict_step(entry, "step");
    const std::string prefix = str_cat("state.", key, ".");
    state.state1 =
        load_state_tensor(saved, prefix + "state1", param.shape(), dtype, param.device());
    state.state2 =
        load_state_tensor(saved, prefix + "state2", param.shape(), dtype, param.device());
    if (eight_bit) {
      const Shape blocks{bnb_block_count(param.numel())};
      state.absmax1 =
          load_state_tensor(saved, prefix + "absmax1", blocks, DType::f32, param.device());
      state.absmax2 =
          load_state_tensor(saved, prefix + "absmax2", blocks, DType::f32, param.device());
    }
  });
  states_ = std::move(states);
}

const AdamW8bitState& AdamW8bit::state(size_t group, size_t index) const {
  if (group >= states_.size() || index >= states_[group].size()) {
    throw IndexError(str_cat("AdamW8bit::state: no parameter ", index, " in group ", group));
  }
  return states_[group][index];
}

}  // namespace headroom
