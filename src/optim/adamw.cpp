// AdamW: option checks as torch's, lazy state, per-step coefficients in double (as Python
// computes them) handed to the device's adamw table (backend/adamw_kernels.h; one call per list
// of parameters that share them, in the tensors' own dtypes).
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/adamw_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/memory_category.h"

namespace headroom {

namespace {

void check_options(const AdamWOptions& o) {
  check_adam_hyperparameters("AdamW", o.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
  if (o.state_dtype != DType::f32 && o.state_dtype != DType::bf16) {
    throw NotImplementedError(str_cat("AdamW: state_dtype ", dtype_name(o.state_dtype),
                                      "; only f32 and bf16 states are supported"));
  }
}

bool is_float_format(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

void check_param(const std::string& name, const Tensor& param) {
  if (!param.defined()) throw ValueError(str_cat("AdamW: parameter '", name, "' is undefined"));
  if (!is_float_format(param.dtype())) {
    throw NotImplementedError(str_cat("AdamW: parameter '", name, "' is ",
                                      dtype_name(param.dtype()),
                                      "; only f32, bf16 and f16 parameters are supported"));
  }
  if (!param.is_leaf()) {
    throw ValueError(str_cat("AdamW: can't optimize a non-leaf tensor ('", name, "')"));
  }
  if (!param.is_contiguous()) {
    throw ValueError(str_cat("AdamW: parameter '", name, "' is not contiguous"));
  }
}

}  // namespace

void check_adam_hyperparameters(const char* optimizer, double lr, double beta1, double beta2,
                                double eps, double weight_decay) {
  // torch.optim.AdamW's checks and messages.
  if (!(lr >= 0.0)) throw ValueError(str_cat(optimizer, ": Invalid learning rate: ", lr));
  if (!(eps >= 0.0)) throw ValueError(str_cat(optimizer, ": Invalid epsilon value: ", eps));
  if (!(beta1 >= 0.0 && beta1 < 1.0)) {
    throw ValueError(str_cat(optimizer, ": Invalid beta parameter at index 0: ", beta1));
  }
  if (!(beta2 >= 0.0 && beta2 < 1.0)) {
    throw ValueError(str_cat(optimizer, ": Invalid beta parameter at index 1: ", beta2));
  }
  if (!(weight_decay >= 0.0)) {
    throw ValueError(str_cat(optimizer, ": Invalid weight_decay value: ", weight_decay));
  }
}

std::vector<StateTensor> AdamW::state_layout(const Shape& shape, DType param_dtype,
                                             const AdamWOptions& options) {
  std::vector<StateTensor> out{{"exp_avg", shape, options.state_dtype},
                               {"exp_avg_sq", shape, options.state_dtype}};
  if (param_dtype != DType::f32 && options.kahan_summation) {
    out.push_back({"compensation", shape, DType::bf16});
  }
  return out;
}

AdamW::AdamW(const std::vector<Tensor>& params, const AdamWOptions& options)
    : AdamW(numbered_params(params), options) {}

AdamW::AdamW(const std::vector<NamedTensor>& named_params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{.params = named_params}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : options_(options), rounding_generator_(options.rounding_seed) {
  check_options(options_);
  auto check_group = [this](double lr, double weight_decay) {
    check_adam_hyperparameters("AdamW", lr, options_.beta1, options_.beta2, options_.eps,
                               weight_decay);
  };
  set_param_groups(std::move(groups), options_.lr, options_.weight_decay, check_group, check_param);
  for (const ParamGroup& group : groups_) states_.emplace_back(group.params.size());
}

namespace {

// Parameters whose update is one call of the list entry: one group, one step count, one dtype,
// compensated or not, rounded stochastically or not (Note [Tensor lists]).
struct AdamWCall {
  int64_t step = 0;
  DType param_dtype = DType::f32;
  bool compensated = false;
  bool stochastic = false;
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, compensations;
  std::vector<PhiloxState> rngs;

  bool takes(int64_t s, DType dtype, bool comp, bool stoch) const {
    return step == s && param_dtype == dtype && compensated == comp && stochastic == stoch;
  }
};

}  // namespace

void AdamW::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double lr = *groups_[g].lr;
    const double weight_decay = *groups_[g].weight_decay;
    std::vector<AdamWCall> calls;  // few: a group's parameters usually share all four
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto& [name, param] = groups_[g].params[i];
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      if (!is_float_format(grad.dtype())) {
        throw NotImplementedError(str_cat("AdamW: the gradient of '", name, "' is ",
                                          dtype_name(grad.dtype()),
                                          "; only f32, bf16 and f16 gradients are supported"));
      }
      const bool low_precision_param = param.dtype() != DType::f32;
      AdamWState& state = states_[g][i];
      if (!state.exp_avg.defined()) {
        MemoryCategoryScope states(MemoryCategory::optimizer_states);
        state.exp_avg = Tensor::zeros(param.shape(), options_.state_dtype, param.device());
        state.exp_avg_sq = Tensor::zeros(param.shape(), options_.state_dtype, param.device());
        if (low_precision_param && options_.kahan_summation) {
          state.compensation = Tensor::zeros(param.shape(), DType::bf16, param.device());
        }
      }
      ++state.step;
      const bool compensated = state.compensation.defined();
      const bool stochastic = low_precision_param && !compensated && options_.stochastic_rounding;
      const DType param_dtype = param.dtype();  // a lambda may not capture the binding (clang 14)
      auto call = std::find_if(calls.begin(), calls.end(), [&](const AdamWCall& c) {
        return c.takes(state.step, param_dtype, compensated, stochastic);
      });
      if (call == calls.end()) {
        AdamWCall fresh;
        fresh.step = state.step;
        fresh.param_dtype = param.dtype();
        fresh.compensated = compensated;
        fresh.stochastic = stochastic;
        call = calls.insert(calls.end(), std::move(fresh));
      }
      call->params.push_back(param);
      call->grads.push_back(grad.contiguous());  // a copy only for a strided gradient
      call->exp_avgs.push_back(state.exp_avg);
      call->exp_avg_sqs.push_back(state.exp_avg_sq);
      if (compensated) call->compensations.push_back(state.compensation);
      // Reserved on every device and in parameter order, so that a dry run leaves the generator
      // where a real run does.
      if (stochastic) {
        call->rngs.push_back(rounding_generator_.reserve(static_cast<uint64_t>(param.numel())));
      }
    }
    for (const AdamWCall& call : calls) {
      // Python floats in torch's code: double arithmetic, then rounded to the tensor's float.
      const double step = static_cast<double>(call.step);
      const double bias_correction1 = 1.0 - std::pow(options_.beta1, step);
      const double bias_correction2 = 1.0 - std::pow(options_.beta2, step);
      const AdamWCoefficients c{
          .decay = static_cast<float>(1.0 - lr * weight_decay),
          .beta1 = static_cast<float>(options_.beta1),
          .one_minus_beta1 = static_cast<float>(1.0 - options_.beta1),
          .beta2 = static_cast<float>(options_.beta2),
          .one_minus_beta2 = static_cast<float>(1.0 - options_.beta2),
          .bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2)),
          .eps = static_cast<float>(options_.eps),
          .neg_step_size = static_cast<float>(-(lr / bias_correction1)),
      };
      const auto& update =
          need_kernel("AdamW", call.params.front().device(), &AdamWKernels::update);
      for_each_list_slice(call.params.size(), [&](size_t begin, size_t n) {
        auto slice = [&](const std::vector<Tensor>& list) {
          return list.empty() ? TensorList() : TensorList(list).subspan(begin, n);
        };
        update(slice(call.params), slice(call.grads), slice(call.exp_avgs), slice(call.exp_avg_sqs),
               slice(call.compensations), call.stochastic,
               call.rngs.empty() ? std::span<const PhiloxState>()
                                 : std::span<const PhiloxState>(call.rngs).subspan(begin, n),
               c);
      });
    }
  }
}

void AdamW::check_lr(double lr) const {
  AdamWOptions checked = options_;
  checked.lr = lr;
  check_options(checked);
}

OptimizerStateDict AdamW::state_dict() const {
  OptimizerStateDict result{.meta = state_dict_meta(), .tensors = {}};
  nlohmann::json per_param = nlohmann::json::object();
  for_each_param([&](size_t g, size_t i, const std::string& key, const Tensor&) {
    const AdamWState& state = states_[g][i];
    if (!state.exp_avg.defined()) return;
    per_param[key] = {{"step", state.step}};
    result.tensors.emplace_back(str_cat("state.", key, ".exp_avg"), state.exp_avg);
    result.tensors.emplace_back(str_cat("state.", key, ".exp_avg_sq"), state.exp_avg_sq);
    if (state.compensation.defined()) {
      result.tensors.emplace_back(str_cat("state.", key, ".compensation"), state.compensation);
    }
  });
  result.meta["state"] = std::move(per_param);
  result.meta["rounding_generator"] = {{"seed", rounding_generator_.seed()},
                                       {"offset", rounding_generator_.offset()}};
  return result;
}

void AdamW::load_state_dict(const OptimizerStateDict& saved) {
  load_state_dict_meta(saved.meta);
  std::vector<std::vector<AdamWState>> states;
  for (const ParamGroup& group : groups_) states.emplace_back(group.params.size());
  for_each_saved_state(saved, [&](size_t g, size_t i, const std::string& key, const Tensor& param,
                                  const nlohmann::json& entry) {
    AdamWState& state = states[g][i];
    state.step = state_dict_step(entry, "step");
    state.exp_avg = load_state_tensor(saved, str_cat("state.", key, ".exp_avg"), param.shape(),
                                      options_.state_dtype, param.device());
    state.exp_avg_sq = load_state_tensor(saved, str_cat("state.", key, ".exp_avg_sq"),
                                         param.shape(), options_.state_dtype, param.device());
    if (param.dtype() != DType::f32 && options_.kahan_summation) {
      state.compensation = load_state_tensor(saved, str_cat("state.", key, ".compensation"),
                                             param.shape(), DType::bf16, param.device());
    }
  });
  const nlohmann::json& rng = state_dict_entry(saved.meta, "rounding_generator");
  const uint64_t seed = state_dict_unsigned(rng, "seed");
  const uint64_t offset = state_dict_unsigned(rng, "offset");
  rounding_generator_.manual_seed(seed);
  rounding_generator_.set_offset(offset);
  states_ = std::move(states);
}

const AdamWState& AdamW::state(size_t group, size_t index) const {
  if (group >= states_.size() || index >= states_[group].size()) {
    throw IndexError(str_cat("AdamW::state: no parameter ", index, " in group ", group));
  }
  return states_[group][index];
}

}  // namespace headroom
