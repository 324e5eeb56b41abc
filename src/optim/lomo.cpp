// LOMO: the hooks, the two-pass norm and the fused update (See Note [LOMO backward passes]), on
// the device's grad_check and lomo tables (the CPU's kernels: backend/cpu/grad_checks.cpp,
// lomo.cpp).
#include "optim/lomo.h"

#include "autograd/accumulate_grad.h"
#include "backend/grad_check_kernels.h"
#include "backend/lomo_kernels.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/kernel_census.h"

namespace headroom {

namespace {

void check_options(const LomoOptions& o) {
  if (!(o.lr >= 0.0)) throw ValueError(str_cat("Lomo: Invalid learning rate: ", o.lr));
  if (!(o.weight_decay >= 0.0)) {
    throw ValueError(str_cat("Lomo: Invalid weight_decay value: ", o.weight_decay));
  }
  if (o.clip_grad_norm && !(*o.clip_grad_norm > 0.0)) {
    throw ValueError(str_cat("Lomo: clip_grad_norm should be positive, got ", *o.clip_grad_norm));
  }
  if (o.clip_grad_value && !(*o.clip_grad_value > 0.0)) {
    throw ValueError(str_cat("Lomo: clip_grad_value should be positive, got ", *o.clip_grad_value));
  }
}

using LomoCoefficients = LomoKernels::Coefficients;

}  // namespace

Lomo::Lomo(const std::vector<Tensor>& params, const LomoOptions& options)
    : Lomo(numbered_params(params), options) {}

Lomo::Lomo(const std::vector<NamedTensor>& named_params, const LomoOptions& options)
    : Lomo(std::vector<ParamGroup>{ParamGroup{.params = named_params}}, options) {}

Lomo::Lomo(std::vector<ParamGroup> groups, const LomoOptions& options) : options_(options) {
  check_options(options_);
  set_param_groups(std::move(groups), options_.lr, options_.weight_decay);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& param = groups_[g].params[i].second;
      if (!param.requires_grad()) continue;  // never gets a gradient
      const int handle = register_post_accumulate_grad_hook(
          param, [this, g, i](const Tensor&) { on_gradient(g, i); });
      hooks_.emplace_back(param, handle);
    }
  }
}

Lomo::~Lomo() {
  for (const auto& [param, handle] : hooks_) remove_post_accumulate_grad_hook(param, handle);
}

void Lomo::begin_backward_pass(int pass) {
  if (pass < 0 || pass >= backward_passes()) {
    throw ValueError(str_cat("Lomo: begin_backward_pass(", pass, "): this optimizer runs ",
                             backward_passes(), " backward pass(es) per step"));
  }
  if (options_.clip_grad_norm && pass == 0) {
    phase_ = Phase::measuring;
    norm_partials_ = Tensor();
    norm_result_ = Tensor();
    return;
  }
  if (options_.clip_grad_norm && norm_partials_.defined()) {
    // The total norm and the clip factor stay on the device (See Note [Gradient norms on a
    // native device]); the factor is read there by each update.
    const Device device = norm_partials_.device();
    norm_result_ = Tensor::empty({2}, DType::f32, device);
    need_kernel("Lomo", device, &GradCheckKernels::norm_combine)(
        norm_partials_, norm_partials_.shape()[0], 2.0, *options_.clip_grad_norm, ClipRule::lomo,
        norm_result_);
    norm_partials_ = Tensor();
  }
  phase_ = Phase::updating;
}

void Lomo::on_gradient(size_t group, size_t index) {
  const auto& [param_name, param] = groups_[group].params[index];
  if (phase_ == Phase::measuring) {
    NoGradGuard no_grad;
    measure(flat_index(group, index), floating_grad(param_name, param.grad()));
    param.set_grad(Tensor());
    return;
  }
  if (phase_ == Phase::idle && options_.clip_grad_norm) {
    throw ValueError(str_cat("Lomo: clip_grad_norm=", *options_.clip_grad_norm,
                             " needs two backward passes per step: call begin_backward_pass(0) "
                             "before the first and begin_backward_pass(1) before the second"));
  }
  apply(group, index);
}

size_t Lomo::flat_index(size_t group, size_t index) const {
  for (size_t g = 0; g < group; ++g) index += groups_[g].params.size();
  return index;
}

void Lomo::measure(size_t flat, const Tensor& grad) {
  if (!norm_partials_.defined()) {
    // Zeros: a parameter without a gradient in this pass adds nothing to the norm.
    const auto count = static_cast<int64_t>(flat_index(groups_.size(), 0));
    norm_partials_ = Tensor::zeros({count, kNormPartialBlocks}, DType::i64, grad.device());
  }
  need_kernel("Lomo", grad.device(), &GradCheckKernels::norm_partial)(
      TensorList(&grad, 1), 2.0, norm_partials_, static_cast<int64_t>(flat));
}

void Lomo::apply(size_t group, size_t index) {
  NoGradGuard no_grad;
  const auto& [param_name, param] = groups_[group].params[index];
  const double lr = *groups_[group].lr;
  const double weight_decay = *groups_[group].weight_decay;
  const LomoCoefficients c{
      .lr = static_cast<float>(lr),
      .decay = weight_decay > 0.0,
      .decay_factor = static_cast<float>(1.0 - lr * weight_decay),
      .clip_value = options_.clip_grad_value.has_value(),
      .clip_grad_value = static_cast<float>(options_.clip_grad_value.value_or(0.0))};
  const Tensor grad = floating_grad(param_name, param.grad());
  need_kernel("Lomo", param.device(), &LomoKernels::update)(param, grad, norm_result_, c);
  param.set_grad(Tensor());  // freed at once: the point of LOMO
}

void Lomo::step() {
  if (phase_ == Phase::measuring) {
    phase_ = Phase::idle;
    throw ValueError(
        "Lomo: step() right after pass 0 of clip_grad_norm: run pass 1 (the update) "
        "first");
  }
  if (phase_ == Phase::idle && options_.clip_grad_norm) {
    for (const ParamGroup& group : groups_) {
      for (const auto& [param_name, param] : group.params) {
        if (param.grad().defined()) {
          throw ValueError(str_cat("Lomo: clip_grad_norm=", *options_.clip_grad_norm,
                                   " needs the global norm first: call begin_backward_pass(0) "
                                   "and (1) around two backward passes"));
        }
      }
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (groups_[g].params[i].second.grad().defined()) apply(g, i);
    }
  }
  phase_ = Phase::idle;
  count_skipped_host_read(norm_result_);
  if (norm_result_.defined() && norm_result_.device().type != DeviceType::meta) {
    grad_norm_ = norm_result_.to(kCPU).data<float>()[0];  // the step's one host read
  }
  norm_result_ = Tensor();
}

double Lomo::grad_norm() const {
  if (norm_result_.defined() && norm_result_.device().type != DeviceType::meta) {
    return norm_result_.to(kCPU).data<float>()[0];
  }
  return grad_norm_;
}

OptimizerStateDict Lomo::state_dict() const {
  OptimizerStateDict result{.meta = state_dict_meta(), .tensors = {}};
  result.meta["state"] = nlohmann::json::object();
  return result;
}

void Lomo::load_state_dict(const OptimizerStateDict& saved) { load_state_dict_meta(saved.meta); }

}  // namespace headroom
