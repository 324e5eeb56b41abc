// GradScaler: torch.amp.GradScaler's stage tracking per optimizer and its update rules (as
// aten/src/ATen/native/cuda/AmpKernels.cu computes them), with Megatron's hysteresis and floor.
#include "amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/grad_check_kernels.h"
#include "core/error.h"
#include "core/kernel_census.h"
#include "ops/elementwise.h"
#include "ops/op_support.h"
#include "optim/optimizer.h"

namespace headroom {

namespace {

void check_options(const GradScalerOptions& o) {
  if (!o.enabled) return;
  // torch's assertions.
  if (!(o.growth_factor > 1.0)) {
    throw ValueError(str_cat("GradScaler: growth_factor must be > 1.0, not ", o.growth_factor));
  }
  if (!(o.backoff_factor < 1.0)) {
    throw ValueError(str_cat("GradScaler: backoff_factor must be < 1.0, not ", o.backoff_factor));
  }
  if (o.hysteresis < 1) {
    throw ValueError(str_cat("GradScaler: hysteresis must be >= 1, not ", o.hysteresis));
  }
  if (!(o.min_scale >= 0.0 && std::isfinite(o.min_scale))) {
    throw ValueError(str_cat("GradScaler: min_scale must be finite and >= 0, not ", o.min_scale));
  }
  // The scale is kept as fp32: 0, a negative or a value past fp32's range (inf) would skip or
  // corrupt every step. The factors must keep it finite and positive.
  if (!(o.init_scale > 0.0 && std::isfinite(static_cast<float>(o.init_scale)))) {
    throw ValueError(str_cat("GradScaler: the scale must be > 0 and finite in fp32 (at most ",
                             std::numeric_limits<float>::max(), "), not ", o.init_scale));
  }
  if (!std::isfinite(o.growth_factor)) {
    throw ValueError(str_cat("GradScaler: growth_factor must be finite, not ", o.growth_factor));
  }
  if (!(o.backoff_factor > 0.0)) {
    throw ValueError(str_cat("GradScaler: backoff_factor must be > 0, not ", o.backoff_factor));
  }
  if (o.growth_interval < 1) {
    throw ValueError(str_cat("GradScaler: growth_interval must be >= 1, not ", o.growth_interval));
  }
}

// The fused pass over the gradients (torch's _amp_foreach_non_finite_check_and_unscale_), one
// launch per list slice (Note [Tensor lists]), in place in their own dtypes on their device: sets
// `flag` (f32 [1], zeroed by the caller on the gradients' device) when any held inf or NaN, with
// no host read.
void unscale_and_check(const std::vector<Tensor>& grads, float inv_scale, const Tensor& flag) {
  std::vector<Tensor> work;
  work.reserve(grads.size());
  for (const Tensor& grad : grads) {
    if (flag.device() != grad.device()) {
      throw ValueError(str_cat("GradScaler.unscale_: gradients on ", flag.device(), " and ",
                               grad.device(), "; one optimizer's gradients must share a device"));
    }
    grad.storage()->bump_version();
    work.push_back(grad.contiguous());  // the gradient itself unless strided
  }
  const auto& kernel =
      need_kernel("GradScaler.unscale_", flag.device(), &GradCheckKernels::unscale_and_check);
  for_each_list_slice(work.size(), [&](size_t begin, size_t n) {
    kernel(TensorList(work).subspan(begin, n), inv_scale, flag);
  });
  for (size_t i = 0; i < grads.size(); ++i) {
    if (work[i].storage() != grads[i].storage()) grads[i].copy_(work[i]);
  }
}

// Folds a device flag into `state` (one host read; none on meta) and drops it.
template <typename State>
void resolve_found_inf(State& state) {
  if (!state.found_inf_flag.defined()) return;
  count_skipped_host_read(state.found_inf_flag);
  if (state.found_inf_flag.device().type != DeviceType::meta) {
    state.found_inf |= state.found_inf_flag.to(kCPU).template data<float>()[0] != 0.0f;
  }
  state.found_inf_flag = Tensor();
}

const nlohmann::json& require_key(const nlohmann::json& state, const char* key) {
  auto it = state.find(key);
  if (it == state.end()) {
    throw ValueError(str_cat("GradScaler.load_state_dict: missing key '", key, "'"));
  }
  return *it;
}

double number_at(const nlohmann::json& state, const char* key) {
  const nlohmann::json& value = require_key(state, key);
  if (!value.is_number()) {
    throw ValueError(str_cat("GradScaler.load_state_dict: '", key, "' must be a number, not ",
                             value.type_name()));
  }
  return value.get<double>();
}

int64_t integer_at(const nlohmann::json& state, const char* key) {
  const nlohmann::json& value = require_key(state, key);
  if (!value.is_number_integer()) {
    throw ValueError(str_cat("GradScaler.load_state_dict: '", key, "' must be an integer, not ",
                             value.type_name(), " ", value.dump()));
  }
  return value.get<int64_t>();
}

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& options)
    : options_(options),
      scale_(static_cast<float>(options.init_scale)),
      hysteresis_tracker_(options.hysteresis) {
  check_options(options_);
  // Megatron's assertion; a loaded state may hold a scale below the floor (update(new_scale)).
  if (options_.enabled && options_.min_scale > options_.init_scale) {
    throw ValueError(str_cat("GradScaler: min_scale (", options_.min_scale,
                             ") must not exceed init_scale (", options_.init_scale, ")"));
  }
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  check_floating("GradScaler.scale", "loss", loss);
  started_ = true;
  if (loss.ndim() == 0 && loss.dtype() != DType::f32) {
    return mul(loss, Tensor::full(Shape(), scale_, DType::f32, loss.device()));
  }
  return ::headroom::scale(loss, scale_);
}

void GradScaler::check_started(const char* function) const {
  if (!started_) {
    throw Error(str_cat("Attempted ", function,
                        " but the scale is not initialized.  This may "
                        "indicate your script did not use scaler.scale(loss or outputs) earlier "
                        "in the iteration."));
  }
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_started("unscale_");
  OptimizerState& state = optimizer_states_[&optimizer];
  if (state.stage == Stage::unscaled) {
    throw Error("unscale_() has already been called on this optimizer since the last update().");
  }
  if (state.stage == Stage::stepped) throw Error("unscale_() is being called after step().");

  // Every gradient is checked before any is touched, so a refusal changes nothing.
  std::vector<Tensor> grads;
  for (const ParamGroup& group : optimizer.param_groups()) {
    for (const auto& [name, param] : group.params) {
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      if (grad.dtype() == DType::f16 && !options_.allow_fp16_grads) {
        throw ValueError("Attempting to unscale FP16 gradients.");
      }
      if (grad.dtype() != DType::f32 && grad.dtype() != DType::bf16 && grad.dtype() != DType::f16) {
        throw NotImplementedError(str_cat("GradScaler.unscale_: the gradient of '", name, "' is ",
                                          dtype_name(grad.dtype()),
                                          "; f32, bf16 and f16 gradients are supported"));
      }
      grads.push_back(std::move(grad));
    }
  }
  // In double, as torch: "FP32 division can be imprecise for certain compile options".
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  // One found_inf flag on the gradients' device for all of this step's gradients, read back
  // once by step() or update().
  Tensor flag;
  if (!grads.empty()) {
    flag = Tensor::zeros({1}, DType::f32, grads.front().device());
    unscale_and_check(grads, inv_scale, flag);
  }
  state.recorded = !grads.empty();
  state.found_inf = false;
  state.found_inf_flag = flag;
  state.stage = Stage::unscaled;
}

void GradScaler::record_overflow(const Optimizer& optimizer) {
  if (!options_.enabled) return;
  auto it = optimizer_states_.find(&optimizer);
  if (it == optimizer_states_.end() || it->second.stage != Stage::unscaled) {
    throw Error("record_overflow() needs unscale_() of this optimizer since the last update().");
  }
  it->second.found_inf = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  check_started("step");
  OptimizerState& state = optimizer_states_[&optimizer];  // stable while the map grows
  if (state.stage == Stage::stepped) {
    throw Error("step() has already been called since the last update().");
  }
  if (state.stage == Stage::ready) unscale_(optimizer);
  if (!state.recorded) throw Error("No inf checks were recorded for this optimizer.");
  resolve_found_inf(state);
  if (!state.found_inf) optimizer.step();
  state.stage = Stage::stepped;
  return !state.found_inf;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_started("update");
  bool recorded = false, found = false;
  for (auto& [optimizer, state] : optimizer_states_) {
    resolve_found_inf(state);
    recorded |= state.recorded;
    found |= state.found_inf;
  }
  if (!recorded) throw Error("No inf checks were recorded prior to update.");
  if (options_.dynamic) update_dynamic(found);
  optimizer_states_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_started("update");
  scale_ = static_cast<float>(new_scale);
  optimizer_states_.clear();
}

void GradScaler::update_dynamic(bool found_inf) {
  // AmpKernels.cu multiplies the fp32 scale by a double factor and stores the product as fp32.
  const double current = scale_;
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_tracker_ <= 0) {
      scale_ = std::max(static_cast<float>(current * options_.backoff_factor),
                        static_cast<float>(options_.min_scale));
    }
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    // Do not grow the scale past fp32 bounds to inf (torch >= 2.1).
    const float grown = static_cast<float>(current * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
    hysteresis_tracker_ = options_.hysteresis;
  }
}

bool GradScaler::found_inf(const Optimizer& optimizer) const {
  auto it = optimizer_states_.find(&optimizer);
  if (it == optimizer_states_.end()) return false;
  OptimizerState state = it->second;  // a const query: the flag is read, not folded in
  resolve_found_inf(state);
  return state.found_inf;
}

nlohmann::json GradScaler::state_dict() const {
  if (!options_.enabled) return nlohmann::json::object();
  nlohmann::json state = {
      {"scale", static_cast<double>(scale_)},      {"growth_factor", options_.growth_factor},
      {"backoff_factor", options_.backoff_factor}, {"growth_interval", options_.growth_interval},
      {"_growth_tracker", growth_tracker_},
  };
  if (options_.hysteresis != 1) {
    state["hysteresis"] = options_.hysteresis;
    state["_hysteresis_tracker"] = hysteresis_tracker_;
  }
  if (options_.min_scale > 0.0) state["min_scale"] = options_.min_scale;
  if (!options_.dynamic) state["dynamic"] = false;
  return state;
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  if (!options_.enabled) return;
  if (!state.is_object()) {
    throw ValueError(
        str_cat("GradScaler.load_state_dict: expected an object, not ", state.type_name()));
  }
  if (state.empty()) {
    throw Error(
        "The source state dict is empty, possibly because it was saved from a disabled "
        "instance of GradScaler.");
  }
  GradScalerOptions options = options_;
  const double scale = number_at(state, "scale");
  options.init_scale = scale;
  options.growth_factor = number_at(state, "growth_factor");
  options.backoff_factor = number_at(state, "backoff_factor");
  options.growth_interval = integer_at(state, "growth_interval");
  const int64_t growth_tracker = integer_at(state, "_growth_tracker");
  options.hysteresis = state.contains("hysteresis") ? integer_at(state, "hysteresis") : 1;
  const int64_t hysteresis_tracker = state.contains("_hysteresis_tracker")
                                         ? integer_at(state, "_hysteresis_tracker")
                                         : options.hysteresis;
  options.min_scale = state.contains("min_scale") ? number_at(state, "min_scale") : 0.0;
  options.dynamic = true;
  if (auto it = state.find("dynamic"); it != state.end()) {
    if (!it->is_boolean()) {
      throw ValueError(str_cat("GradScaler.load_state_dict: 'dynamic' must be a boolean, not ",
                               it->type_name()));
    }
    options.dynamic = it->get<bool>();
  }
  check_options(options);
  if (growth_tracker < 0 || growth_tracker >= options.growth_interval) {
    throw ValueError(str_cat("GradScaler.load_state_dict: '_growth_tracker' is ", growth_tracker,
                             ", outside 0..", options.growth_interval - 1,
                             " (growth_interval - 1)"));
  }
  if (hysteresis_tracker > options.hysteresis) {
    throw ValueError(str_cat("GradScaler.load_state_dict: '_hysteresis_tracker' is ",
                             hysteresis_tracker, ", above hysteresis ", options.hysteresis));
  }
  options_ = options;
  scale_ = static_cast<float>(scale);
  growth_tracker_ = growth_tracker;
  hysteresis_tracker_ = hysteresis_tracker;
}

}  // namespace headroom
