// Adafactor: HF's option checks, lazy factored statistics, and the step handed to the device's
// adafactor table (backend/adafactor_kernels.h; Note [Adafactor step] in
// backend/cpu/adafactor.cpp), which leaves the RMS and lr_t on the device: no host read.
#include "optim/adafactor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/adafactor_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/memory_category.h"

namespace headroom {

namespace {

void check_options(const AdafactorOptions& o) {
  // HF's two checks, with its messages, then the ranges HF leaves unchecked.
  if (o.lr.has_value() && o.relative_step) {
    throw ValueError("Adafactor: Cannot combine manual `lr` and `relative_step=True` options");
  }
  if (o.warmup_init && !o.relative_step) {
    throw ValueError("Adafactor: `warmup_init=True` requires `relative_step=True`");
  }
  if (!o.lr.has_value() && !o.relative_step) {
    throw ValueError("Adafactor: relative_step=False needs an lr");
  }
  if (o.lr.has_value() && !(*o.lr >= 0.0)) {
    throw ValueError(str_cat("Adafactor: Invalid learning rate: ", *o.lr));
  }
  if (!(o.eps1 >= 0.0) || !(o.eps2 >= 0.0)) {
    throw ValueError(
        str_cat("Adafactor: Invalid eps (", o.eps1, ", ", o.eps2, "): both must be >= 0"));
  }
  if (!(o.clip_threshold > 0.0)) {
    throw ValueError(
        str_cat("Adafactor: Invalid clip_threshold: ", o.clip_threshold, " (must be > 0)"));
  }
  if (!(o.decay_rate <= 0.0)) {
    throw ValueError(str_cat("Adafactor: Invalid decay_rate: ", o.decay_rate,
                             " (must be <= 0, so that beta2 = 1 - t^decay_rate is in [0, 1))"));
  }
  if (o.beta1.has_value() && !(*o.beta1 >= 0.0 && *o.beta1 < 1.0)) {
    throw ValueError(str_cat("Adafactor: Invalid beta1: ", *o.beta1, " (must be in [0, 1))"));
  }
  if (!(o.weight_decay >= 0.0)) {
    throw ValueError(str_cat("Adafactor: Invalid weight_decay value: ", o.weight_decay));
  }
}

// HF's grad_shape[:-1] and grad_shape[:-2] + grad_shape[-1:].
Shape row_shape(const Shape& shape) {
  Shape row = shape;
  row.erase(shape.ndim() - 1);
  return row;
}

Shape col_shape(const Shape& shape) {
  Shape col = shape;
  col.erase(shape.ndim() - 2);
  return col;
}

// HF's rho: the group's lr, or the relative step at step t.
double step_rho(const AdafactorOptions& o, double group_lr, double t) {
  if (!o.relative_step) return group_lr;
  return std::min(o.warmup_init ? 1e-6 * t : 1e-2, 1.0 / std::sqrt(t));
}

// Reads the two doubles of AdafactorState::rms_lr.
std::pair<double, double> read_rms_lr(const Tensor& rms_lr) {
  const Tensor host = rms_lr.to(kCPU);
  double values[2];
  std::memcpy(values, host.data<int64_t>(), sizeof(values));
  return {values[0], values[1]};
}

}  // namespace

std::vector<StateTensor> Adafactor::state_layout(const Shape& shape,
                                                 const AdafactorOptions& options) {
  std::vector<StateTensor> out;
  if (shape.ndim() >= 2) {
    out.push_back({"exp_avg_sq_row", row_shape(shape), DType::f32});
    out.push_back({"exp_avg_sq_col", col_shape(shape), DType::f32});
  } else {
    out.push_back({"exp_avg_sq", shape, DType::f32});
  }
  if (options.beta1) out.push_back({"exp_avg", shape, DType::f32});
  return out;
}

Adafactor::Adafactor(const std::vector<Tensor>& params, const AdafactorOptions& options)
    : Adafactor(numbered_params(params), options) {}

Adafactor::Adafactor(const std::vector<NamedTensor>& named_params, const AdafactorOptions& options)
    : Adafactor(std::vector<ParamGroup>{ParamGroup{.params = named_params}}, options) {}

Adafactor::Adafactor(std::vector<ParamGroup> groups, const AdafactorOptions& options)
    : options_(options) {
  check_options(options_);
  set_param_groups(std::move(groups), options_.lr.value_or(0.0), options_.weight_decay);
  for (const ParamGroup& group : groups_) states_.emplace_back(group.params.size());
}

void Adafactor::step() {
  NoGradGuard no_grad;
  const AdafactorOptions& o = options_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& [param_name, param] = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      AdafactorState& state = states_[g][i];
      const bool factored = param.ndim() >= 2;
      const Device device = param.device();
      if (state.step == 0) {
        MemoryCategoryScope states(MemoryCategory::optimizer_states);
        if (factored) {
          state.exp_avg_sq_row = Tensor::zeros(row_shape(param.shape()), DType::f32, device);
          state.exp_avg_sq_col = Tensor::zeros(col_shape(param.shape()), DType::f32, device);
        } else {
          state.exp_avg_sq = Tensor::zeros(param.shape(), DType::f32, device);
        }
        if (o.beta1) state.exp_avg = Tensor::zeros(param.shape(), DType::f32, device);
      }
      ++state.step;
      // rsqrt of the column statistics, for the two passes over the update, and the scalars
      // (Note [Adafactor step]): the RMS values and lr_t stay on the device.
      const Tensor col_factor =
          factored ? Tensor::empty(state.exp_avg_sq_col.shape(), DType::f32, device) : Tensor();
      const int64_t n = param.numel();
      const int64_t cols = factored ? param.shape()[param.ndim() - 1] : 0;
      const int64_t rows = factored ? param.shape()[param.ndim() - 2] : 0;
      const int64_t batch = factored ? (rows * cols == 0 ? 0 : n / (rows * cols)) : 1;
      const Tensor scalars = Tensor::empty({adafactor_scalars(batch)}, DType::i64, device);
      state.rms_lr = scalars.narrow(0, kAdafactorRms, 2);
      const Tensor grad = floating_grad(param_name, param.grad());
      const double t = static_cast<double>(state.step);
      const double beta2t = 1.0 - std::pow(t, o.decay_rate);
      const AdafactorKernels::Coefficients c{
          .beta2t = static_cast<float>(beta2t),
          .one_minus_beta2t = static_cast<float>(1.0 - beta2t),
          .eps1 = static_cast<float>(o.eps1),
          .clip_threshold = static_cast<float>(o.clip_threshold),
          .rho = step_rho(o, *groups_[g].lr, t),
          .eps2 = o.eps2,
          .scale_parameter = o.scale_parameter,
          .weight_decay = *groups_[g].weight_decay,
          .first_moment = o.beta1.has_value(),
          .beta1 = static_cast<float>(o.beta1.value_or(0.0)),
          .one_minus_beta1 = static_cast<float>(1.0 - o.beta1.value_or(0.0))};
      need_kernel("Adafactor", device, &AdafactorKernels::update)(
          param, grad, state.exp_avg, state.exp_avg_sq, state.exp_avg_sq_row, state.exp_avg_sq_col,
          col_factor, batch, rows, cols, scalars, c);
    }
  }
}

OptimizerStateDict Adafactor::state_dict() const {
  OptimizerStateDict result{.meta = state_dict_meta(), .tensors = {}};
  nlohmann::json per_param = nlohmann::json::object();
  for_each_param([&](size_t g, size_t i, const std::string& key, const Tensor&) {
    const AdafactorState& state = states_[g][i];
    if (state.step == 0) return;
    const bool on_device = state.rms_lr.defined() && state.rms_lr.device().type != DeviceType::meta;
    const auto [rms, lr] =
        on_device ? read_rms_lr(state.rms_lr) : std::pair<double, double>{state.rms, state.lr};
    per_param[key] = {{"step", state.step}, {"RMS", rms}, {"lr", lr}};
    for (const auto& [state_name, tensor] :
         {std::pair<const char*, const Tensor*>{"exp_avg_sq_row", &state.exp_avg_sq_row},
          {"exp_avg_sq_col", &state.exp_avg_sq_col},
          {"exp_avg_sq", &state.exp_avg_sq},
          {"exp_avg", &state.exp_avg}}) {
      if (tensor->defined()) {
        result.tensors.emplace_back(str_cat("state.", key, ".", state_name), *tensor);
      }
    }
  });
  result.meta["state"] = std::move(per_param);
  return result;
}

void Adafactor::load_state_dict(const OptimizerStateDict& saved) {
  load_state_dict_meta(saved.meta);
  std::vector<std::vector<AdafactorState>> states;
  for (const ParamGroup& group : groups_) states.emplace_back(group.params.size());
  for_each_saved_state(saved, [&](size_t g, size_t i, const std::string& key, const Tensor& param,
                                  const nlohmann::json& entry) {
    AdafactorState& state = states[g][i];
    state.step = state_dict_step(entry, "step");
    state.rms = state_dict_number(entry, "RMS", 0.0);
    state.lr = state_dict_number(entry, "lr", 0.0);
    auto load = [&](const char* state_name, const Shape& shape) {
      return load_state_tensor(saved, str_cat("state.", key, ".", state_name), shape, DType::f32,
                               param.device());
    };
    if (param.ndim() >= 2) {
      state.exp_avg_sq_row = load("exp_avg_sq_row", row_shape(param.shape()));
      state.exp_avg_sq_col = load("exp_avg_sq_col", col_shape(param.shape()));
    } else {
      state.exp_avg_sq = load("exp_avg_sq", param.shape());
    }
    if (options_.beta1) state.exp_avg = load("exp_avg", param.shape());
  });
  states_ = std::move(states);
}

const AdafactorState& Adafactor::state(size_t group, size_t index) const {
  if (group >= states_.size() || index >= states_[group].size()) {
    throw IndexError(str_cat("Adafactor::state: no parameter ", index, " in group ", group));
  }
  return states_[group][index];
}

}  // namespace headroom
